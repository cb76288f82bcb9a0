package acceptance

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// This file runs timeoutmill as its users do, for the fault suite (fault_*_test.go): the
// `timeoutmill run` command as a separate process that a test can kill -9 or SIGTERM, whose
// stderr it reads, and private PostgreSQL and RabbitMQ servers (started with scripts/services.sh
// on a state directory and ports of their own) that a test can stop and start without touching
// the servers every other test shares.

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// TestMain removes the timeoutmill binary the fault suite built, if it built one.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// timeoutmillBinary builds cmd/timeoutmill once per test binary, without -race: the process
// under test is the command as shipped. `go test` puts its own go first on PATH.
func timeoutmillBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "timeoutmill-fault-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "timeoutmill")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/timeoutmill/timeoutmill/cmd/timeoutmill").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/timeoutmill: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// logLine is one line a service wrote, stamped when the test read it.
type logLine struct {
	at   time.Time
	text string
}

// service is one `timeoutmill` process. It is killed, if still running, when the test ends.
type service struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{}

	mu       sync.Mutex
	lines    []logLine
	exitCode int
}

// childEnv is the test's environment without TIMEOUTMILL_* variables, which the command would
// read as flags: a service gets its settings from its arguments only.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TIMEOUTMILL_") {
			env = append(env, kv)
		}
	}
	return env
}

// startService starts `timeoutmill args...` and, for the run command, waits until it logs that
// it is running (its queues and table exist then).
func startService(t *testing.T, name string, args ...string) *service {
	t.Helper()
	s := runCommand(t, name, args...)
	if len(args) > 0 && args[0] == "run" {
		if _, ok := s.waitLog(`msg=Running`, 90*time.Second); !ok {
			s.kill()
			t.Fatalf("%s did not start within 90 s; its output:\n%s", name, s.output())
		}
	}
	return s
}

// runCommand starts `timeoutmill args...` without waiting for anything.
func runCommand(t *testing.T, name string, args ...string) *service {
	t.Helper()
	cmd := exec.Command(timeoutmillBinary(t), args...)
	cmd.Env = childEnv()
	// The service dies with the test binary, should that be killed before its cleanups run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	s := &service{name: name, cmd: cmd, exited: make(chan struct{}), exitCode: -1}
	require.NoError(t, cmd.Start())
	s.started = time.Now()

	var readers sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			s.read(r)
		}()
	}
	go func() {
		readers.Wait() // Wait only after the pipes are drained
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			code = -2
		}
		s.mu.Lock()
		s.exitCode = code
		s.mu.Unlock()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("last output of %s:\n%s", s.name, s.tail(60))
		}
	})
	return s
}

func (s *service) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := logLine{at: time.Now(), text: sc.Text()}
		s.mu.Lock()
		s.lines = append(s.lines, line)
		s.mu.Unlock()
		if os.Getenv("TIMEOUTMILL_TEST_LOG") != "" {
			fmt.Fprintf(os.Stderr, "[%s] %s\n", s.name, line.text)
		}
	}
	_, _ = io.Copy(io.Discard, r) // a line over 4 MiB: keep draining
}

// running reports whether the process has not exited.
func (s *service) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (s *service) kill() {
	if !s.running() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// signal sends sig to the process.
func (s *service) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(sig))
}

// wait waits up to within for the process to exit and returns its exit code and when it was
// seen to exit; the test fails if it is still running then.
func (s *service) wait(t *testing.T, within time.Duration) (code int, at time.Time) {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(within):
		t.Fatalf("%s still running after %s", s.name, within)
	}
	at = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitCode, at
}

// waitLog waits up to within for a line containing substr, and returns the first such line.
func (s *service) waitLog(substr string, within time.Duration) (logLine, bool) {
	deadline := time.Now().Add(within)
	for {
		if l, ok := s.find(substr); ok {
			return l, true
		}
		if time.Now().After(deadline) {
			return logLine{}, false
		}
		select {
		case <-s.exited:
			// The pipes are drained before exited closes: what was written is all there.
			l, ok := s.find(substr)
			return l, ok
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *service) find(substr string) (logLine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.Contains(l.text, substr) {
			return l, true
		}
	}
	return logLine{}, false
}

// count is how many lines contain substr.
func (s *service) count(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		if strings.Contains(l.text, substr) {
			n++
		}
	}
	return n
}

// output is everything the process wrote so far, stdout and stderr interleaved as read.
func (s *service) output() string { return s.tail(0) }

// tail is the last n lines (all for n <= 0).
func (s *service) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := s.lines
	if n > 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// runArgs are the arguments of `timeoutmill run` for an endpoint; extra flags follow.
func runArgs(endpoint, store, transport, errorQueue string, extra ...string) []string {
	return append([]string{"run", "--endpoint", endpoint, "--store", store, "--transport", transport,
		"--error-queue", errorQueue}, extra...)
}

// postgresDatabase creates a database of t's own on the PostgreSQL server at base (a URL DSN)
// and drops it when t ends; it returns its DSN. The timeoutmill command keeps its table in the
// public schema, so each test needs a database rather than a schema.
func postgresDatabase(t *testing.T, base string) string {
	t.Helper()
	name := testenv.UniqueName(t, "fault")
	admin, err := sql.Open("pgx", base)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// WITH (FORCE): a killed service may leave a connection behind for a moment.
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// privateServers are a PostgreSQL and a RabbitMQ of one test's own, started by
// scripts/services.sh on a state directory under /tmp and free ports, so that a test may stop
// them without disturbing the shared servers. The RabbitMQ node has a name of its own and
// shares epmd with the shared node. Both are stopped and their data removed when the test ends.
type privateServers struct {
	dir       string
	pgPort    int
	amqpPort  int
	redisPort int
	natsPort  int // its monitoring port is this + 4000
	node      string
}

const (
	pgBin       = "/usr/lib/postgresql/15/bin"
	rabbitmqBin = "/usr/lib/rabbitmq/bin"
)

// newPrivateServers prepares (starts nothing yet) a set of private servers, or skips t where
// they cannot run: not root, or the server binaries missing (fails t under CI, where `make test`
// installs them).
func newPrivateServers(t *testing.T) *privateServers {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (to run PostgreSQL as user postgres)")
	}
	for _, bin := range []string{pgBin + "/initdb", rabbitmqBin + "/rabbitmq-server"} {
		if _, err := os.Stat(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		msg := "private servers need " + strings.Join(missing, ", ") + " (scripts/services.sh up installs the servers)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	tag := randomHex(t, 4)
	p := &privateServers{
		dir:       "/tmp/timeoutmill-fault-" + tag,
		pgPort:    freePort(t, 0),
		amqpPort:  freePort(t, 20000), // the Erlang distribution port is this + 20000
		redisPort: freePort(t, 0),
		natsPort:  freePort(t, 4000),
		node:      "fault" + tag + "@localhost",
	}
	t.Cleanup(func() {
		// services.sh down without names stops all three; the MariaDB it never started is skipped.
		if out, err := p.script("down"); err != nil {
			t.Logf("stopping private servers: %v\n%s", err, out)
		}
		_ = os.RemoveAll(p.dir)
	})
	return p
}

// freePort finds a free TCP port on 127.0.0.1. With distOffset > 0 the port is below 45536 and
// port+distOffset is free too.
func freePort(t *testing.T, distOffset int) int {
	t.Helper()
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if distOffset == 0 {
			return port
		}
		if port+distOffset > 65535 {
			port = 20000 + port%20000
		}
		if portFree(port) && portFree(port+distOffset) {
			return port
		}
	}
	t.Fatal("no free port pair found")
	return 0
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// script runs scripts/services.sh with the private set's settings.
func (p *privateServers) script(args ...string) ([]byte, error) {
	cmd := exec.Command("../scripts/services.sh", args...)
	cmd.Env = append(os.Environ(),
		"TIMEOUTMILL_SERVICES_DIR="+p.dir,
		"TIMEOUTMILL_POSTGRES_PORT="+strconv.Itoa(p.pgPort),
		"TIMEOUTMILL_RABBITMQ_PORT="+strconv.Itoa(p.amqpPort),
		"TIMEOUTMILL_RABBITMQ_NODENAME="+p.node,
		"TIMEOUTMILL_REDIS_PORT="+strconv.Itoa(p.redisPort),
		"TIMEOUTMILL_NATS_PORT="+strconv.Itoa(p.natsPort),
		"TIMEOUTMILL_INSTALL_DIR="+sharedInstallDir(),
	)
	return cmd.CombinedOutput()
}

// sharedInstallDir is where the shared servers' scripts/services.sh builds nats-server: private
// servers use that build rather than make their own.
func sharedInstallDir() string {
	if dir := os.Getenv("TIMEOUTMILL_SERVICES_DIR"); dir != "" {
		return dir
	}
	return "/tmp/timeoutmill-services"
}

// up starts a private server ("postgres", "rabbitmq", "redis" or "nats") and returns how long that took.
func (p *privateServers) up(t *testing.T, svc string) time.Duration {
	t.Helper()
	start := time.Now()
	out, err := p.script("up", svc)
	require.NoError(t, err, "services.sh up %s:\n%s", svc, out)
	return time.Since(start)
}

// down stops a private server cleanly and returns how long that took.
func (p *privateServers) down(t *testing.T, svc string) time.Duration {
	t.Helper()
	start := time.Now()
	out, err := p.script("down", svc)
	require.NoError(t, err, "services.sh down %s:\n%s", svc, out)
	return time.Since(start)
}

// postgresDSN is the private PostgreSQL's test database (trust authentication).
func (p *privateServers) postgresDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/timeoutmill?sslmode=disable&connect_timeout=5", p.pgPort)
}

// amqpURL is the private RabbitMQ's URL.
func (p *privateServers) amqpURL() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", p.amqpPort)
}

// redisURL is the private Redis' URL.
func (p *privateServers) redisURL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", p.redisPort) }

// natsURL is the private NATS' URL.
func (p *privateServers) natsURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.natsPort) }

// sigterm is what an orchestrator sends to stop a service.
var sigterm os.Signal = syscall.SIGTERM
