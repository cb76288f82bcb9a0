package acceptance

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

// The probes of `timeoutmill run` (/healthz, /readyz), read from the real binary over HTTP as an
// orchestrator reads them, for each condition that makes it not ready: before set-up, the store
// down, the broker down, a twin of its instance name.

// probeAnswer is what a probe answered: the status (0 when nothing answered) and the JSON body.
type probeAnswer struct {
	status int
	body   struct {
		Status   string   `json:"status"`
		Endpoint string   `json:"endpoint"`
		Instance string   `json:"instance"`
		NotReady []string `json:"not_ready"`
	}
}

// reason returns the first reason that begins with prefix.
func (a probeAnswer) reason(prefix string) (string, bool) {
	for _, r := range a.body.NotReady {
		if strings.HasPrefix(r, prefix) {
			return r, true
		}
	}
	return "", false
}

func (a probeAnswer) String() string {
	return fmt.Sprintf("%d %s %q", a.status, a.body.Status, a.body.NotReady)
}

// askProbe GETs http://addr/path.
func askProbe(t *testing.T, addr, path string) probeAnswer {
	t.Helper()
	var a probeAnswer
	client := &http.Client{Timeout: 5 * time.Second}
	res, err := client.Get("http://" + addr + path)
	if err != nil {
		return a
	}
	defer res.Body.Close()
	a.status = res.StatusCode
	require.NoError(t, json.NewDecoder(res.Body).Decode(&a.body), "the %s body is JSON", path)
	return a
}

// waitProbe asks addr's path until ok holds, for up to within, and returns the answer that did;
// it fails t with the last answer and the service's output otherwise.
func waitProbe(t *testing.T, svc *service, addr, path string, within time.Duration, what string, ok func(probeAnswer) bool) probeAnswer {
	t.Helper()
	deadline := time.Now().Add(within)
	var last probeAnswer
	for time.Now().Before(deadline) {
		if last = askProbe(t, addr, path); ok(last) {
			return last
		}
		if !svc.running() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %s never came (last answer: %s); the service's output:\n%s", path, what, last, svc.tail(40))
	return last
}

func isReady(a probeAnswer) bool { return a.status == http.StatusOK && a.body.Status == "ready" }

// notReadyFor returns a condition: /readyz answers 503 with a reason beginning with prefix.
func notReadyFor(prefix string) func(probeAnswer) bool {
	return func(a probeAnswer) bool {
		_, ok := a.reason(prefix)
		return a.status == http.StatusServiceUnavailable && a.body.Status == "not ready" && ok
	}
}

// localAddr is a free loopback address for a service's --http.
func localAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(freePort(t, 0)))
}

// TestHealthBeforeSetUpAndStoreDown starts the service before its PostgreSQL: live and not ready,
// naming the store, while it waits; ready once the store is up and set up; not ready, naming the
// fetch breaker and its failure, while the store is down again, though the service runs on (the
// outage is shorter than --outage-wait); ready again once the store is back.
func TestHealthBeforeSetUpAndStoreDown(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	srv := newPrivateServers(t)
	e := newEnv(t, "healthpg")
	addr := localAddr(t)
	svc := runCommand(t, "health-pg", runArgs(e.endpoint, srv.postgresDSN(), e.url, e.errorQueue,
		"--outage-wait", "10m", "--poll-interval", "2s", "--close-timeout", "10s", "--instance", "health-pg-0", "--http", addr)...)

	waitProbe(t, svc, addr, "/healthz", time.Minute, "200 while waiting for the store", func(a probeAnswer) bool {
		return a.status == http.StatusOK && a.body.Status == "serving"
	})
	a := waitProbe(t, svc, addr, "/readyz", time.Minute, "not ready before set-up", notReadyFor("store not open: "))
	require.Equal(t, e.endpoint, a.body.Endpoint)
	require.Equal(t, "health-pg-0", a.body.Instance)
	require.Len(t, a.body.NotReady, 1, "%s", a)

	srv.up(t, "postgres")
	a = waitProbe(t, svc, addr, "/readyz", 2*time.Minute, "ready once the store is set up", isReady)
	require.Empty(t, a.body.NotReady)

	srv.down(t, "postgres")
	a = waitProbe(t, svc, addr, "/readyz", time.Minute, "not ready while the store is down", notReadyFor("breaker fetch armed"))
	reason, _ := a.reason("breaker fetch armed")
	faultLog(t, "store down: %s", a)
	require.Contains(t, reason, "last failure", "the reason says what failed")
	require.Equal(t, http.StatusOK, askProbe(t, addr, "/healthz").status, "live all the while: the process waits as told")
	require.True(t, svc.running())

	srv.up(t, "postgres")
	waitProbe(t, svc, addr, "/readyz", 2*time.Minute, "ready again once the store is back", isReady)

	svc.signal(t, sigterm)
	code, _ := svc.wait(t, time.Minute)
	require.Equal(t, 0, code)
}

// TestHealthBrokerDown stops the service's RabbitMQ while a timeout is due: /readyz names the
// dispatch breaker, whose announcements fail, from the first failure on, and never answers 200
// again while the broker stays down; the outage outlasts the dispatch wait (30 s at most, whatever
// --outage-wait), so the service stops with a critical error naming the dispatch breaker, for its
// orchestrator to start it again.
func TestHealthBrokerDown(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	srv := newPrivateServers(t)
	srv.up(t, "rabbitmq")
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	endpoint := "health-mq-" + randomHex(t, 4)
	addr := localAddr(t)
	svc := startService(t, "health-mq", runArgs(endpoint, dsn, srv.amqpURL(), endpoint+".error",
		"--outage-wait", "10m", "--poll-interval", "2s", "--close-timeout", "10s", "--http", addr)...)
	waitProbe(t, svc, addr, "/readyz", time.Minute, "ready", isReady)

	srv.down(t, "rabbitmq")
	// A timeout due now, stored while the broker is down (with the library's own store, as a
	// producer that schedules in the database would): the poller claims it and cannot announce it.
	store, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Endpoint: endpoint})
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Store(t.Context(), persistence.Timeout{ID: watermill.NewUUID(), Destination: endpoint + ".due", Due: time.Now(), Payload: []byte("due")})
	require.NoError(t, err)

	a := waitProbe(t, svc, addr, "/readyz", time.Minute, "not ready while the broker is down", notReadyFor("breaker dispatch armed"))
	notReadyAt := time.Now()
	faultLog(t, "broker down: %s", a)
	require.Equal(t, http.StatusOK, askProbe(t, addr, "/healthz").status)
	for svc.running() {
		if a := askProbe(t, addr, "/readyz"); a.status != 0 {
			require.False(t, isReady(a), "not ready while the broker is down: %s", a)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, exitedAt := svc.wait(t, time.Minute)
	require.NotZero(t, code)
	_, ok := svc.find("critical error (dispatch breaker")
	require.True(t, ok, "it stops on the dispatch breaker's critical error:\n%s", svc.tail(20))
	faultLog(t, "not ready %s before the critical error stopped it", exitedAt.Sub(notReadyAt).Round(time.Second))
}

// TestHealthTwinInstance starts a twin of a running instance, with --log-format json. What is
// observable of a twin is that it never becomes ready and exits non-zero naming the instance
// (an orchestrator sees a process that fails, not one that serves); its /readyz, asked from the
// moment it listens until it exits, never answers 200. The first instance holds the name and
// stays ready throughout.
func TestHealthTwinInstance(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	e := newEnv(t, "healthtwin")
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	name := "health-twin-" + randomHex(t, 4)
	firstAddr, twinAddr := localAddr(t), localAddr(t)
	args := runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--close-timeout", "10s", "--instance", name)
	first := startService(t, "health-twin-1", append(args, "--http", firstAddr)...)
	a := waitProbe(t, first, firstAddr, "/readyz", time.Minute, "the first is ready", isReady)
	require.Equal(t, name, a.body.Instance)

	twin := runCommand(t, "health-twin-2", append([]string{"--log-format", "json"}, append(args, "--http", twinAddr)...)...)
	var answers []probeAnswer
	for twin.running() {
		if a := askProbe(t, twinAddr, "/readyz"); a.status != 0 {
			require.False(t, isReady(a), "a twin is never ready: %s", a)
			if r, stopped := a.reason("stopped: "); stopped {
				require.Contains(t, r, "instance name in use", "its stop says why")
			}
			answers = append(answers, a)
		}
		require.True(t, isReady(askProbe(t, firstAddr, "/readyz")), "the first stays ready while the twin runs")
		time.Sleep(20 * time.Millisecond)
	}
	code, _ := twin.wait(t, time.Minute)
	require.NotZero(t, code, "the twin exits non-zero; its output:\n%s", twin.output())
	faultLog(t, "twin: %d answers of its /readyz before it exited: %v", len(answers), answers)

	// Its log is JSON, the error it exits with too, which names the instance.
	var exitLine map[string]any
	for _, line := range strings.Split(strings.TrimSpace(twin.output()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "not a JSON line: %q", line)
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, "timeoutmill: ") {
			exitLine = m
		}
	}
	require.NotNil(t, exitLine, "the error it exits with is logged; its output:\n%s", twin.output())
	require.Equal(t, "ERROR", exitLine["level"])
	require.Contains(t, exitLine["msg"], "instance name in use")
	require.Contains(t, exitLine["msg"], name)

	require.True(t, isReady(askProbe(t, firstAddr, "/readyz")), "the first is still ready")
	first.signal(t, sigterm)
	code, _ = first.wait(t, time.Minute)
	require.Equal(t, 0, code)
}
