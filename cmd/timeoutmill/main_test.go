package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// timeoutmill runs the command in-process and returns its exit code and output.
func timeoutmill(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut lockedBuffer
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// lockedBuffer is a bytes.Buffer safe for concurrent use. Watermill's router logs "Subscriber
// stopped" after it has counted the handler as stopped (router.go, v1.5.1), so that line can be
// written while run returns and its output is read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRefusesGoChannelWithAClearMessage(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	start := time.Now()
	code, _, stderr := timeoutmill(context.Background(), "run", "--endpoint", "e", "--store", db, "--transport", "gochannel:")
	require.Equal(t, 1, code)
	require.Less(t, time.Since(start), 30*time.Second, "a wrong address is not retried for the whole outage wait")
	require.Contains(t, stderr, "GoChannel lives inside one process")
}

func TestFlagsComeFromTheEnvironmentToo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	store, err := sqlite.Open(t.Context(), sqlite.Config{Path: path, Endpoint: "from-env"})
	require.NoError(t, err)
	require.NoError(t, store.Close())
	t.Setenv("TIMEOUTMILL_ENDPOINT", "from-env")
	t.Setenv("TIMEOUTMILL_STORE", "sqlite://"+path)
	code, stdout, stderr := timeoutmill(context.Background(), "stats")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "endpoint:     from-env")
	require.Contains(t, stdout, "pending:      0")
}

func TestMissingFlagsAndBadEndpointAreUsageErrors(t *testing.T) {
	t.Parallel()
	code, _, stderr := timeoutmill(context.Background(), "stats")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--endpoint")

	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	code, _, stderr = timeoutmill(context.Background(), "stats", "--endpoint", "has space", "--store", db)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "whitespace")
}

func TestStatsListAndCancelOnAStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	store, err := sqlite.Open(ctx, sqlite.Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	now := time.Now()
	for i, tm := range []persistence.Timeout{
		{ID: "overdue", Destination: "d", Due: now.Add(-time.Minute)},
		{ID: "soon", Destination: "d", Due: now.Add(time.Hour), Owner: "order-1"},
		{ID: "later", Destination: "d", Due: now.Add(2 * time.Hour), Owner: "order-1"},
	} {
		tm.Payload = []byte{byte(i)}
		_, err := store.Store(ctx, tm)
		require.NoError(t, err)
	}
	require.NoError(t, store.Close())
	db := []string{"--endpoint", "orders", "--store", "sqlite://" + path}

	code, stdout, stderr := timeoutmill(ctx, append([]string{"stats"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "pending:      3")
	require.Regexp(t, `most overdue: 1m\d+(\.\d+)?s late`, stdout, "a minute and however long the stores took: never less")

	code, stdout, _ = timeoutmill(ctx, append([]string{"list", "--owner", "order-1"}, db...)...)
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 3, stdout)
	require.True(t, strings.HasPrefix(lines[1], "soon"), "earliest first")

	code, _, stderr = timeoutmill(ctx, append([]string{"cancel"}, db...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "either timeout ids or --owner")

	code, stdout, _ = timeoutmill(ctx, append([]string{"cancel", "--owner", "order-1"}, db...)...)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "cancelled 2 timeouts")

	code, stdout, stderr = timeoutmill(ctx, append([]string{"cancel", "overdue", "nope"}, db...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "cancelled overdue")
	require.Contains(t, stdout, "not pending: nope")
	require.Contains(t, stderr, "1 of 2 ids were not pending")
}

func TestUnreachableStoreEndsWithAnErrorAfterTheOutageWaitWithoutThePassword(t *testing.T) {
	t.Parallel()
	start := time.Now()
	code, _, stderr := timeoutmill(context.Background(), "run", "--endpoint", "e",
		"--store", "postgres://app:topsecret@127.0.0.1:1/db?connect_timeout=1",
		"--transport", "amqp://guest:guest@127.0.0.1:1/", "--outage-wait", "2s")
	require.Equal(t, 1, code)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "it waits for the store as long as the outage wait")
	require.Contains(t, stderr, "127.0.0.1:1")
	require.NotContains(t, stderr, "topsecret")
}

func TestRunDeliversOverRabbitMQAndStopsCleanlyOnSignal(t *testing.T) {
	t.Parallel()
	amqpURL := testenv.AMQPURL(t)
	endpoint := "cmdtest-" + watermill.NewShortUUID()
	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	ctx, stop := context.WithCancel(context.Background()) // stands in for SIGTERM
	defer stop()

	done := make(chan int, 1)
	var stderr string
	go func() {
		var code int
		code, _, stderr = timeoutmill(ctx, "run", "--endpoint", endpoint, "--store", db, "--transport", amqpURL, "--close-timeout", "5s")
		done <- code
	}()

	pub, sub, err := amqptransport.New(amqptransport.Config{URL: amqpURL}, watermill.NopLogger{})
	require.NoError(t, err)
	defer pub.Close()
	defer sub.Close()
	dest := endpoint + ".dest"
	arrivals, err := sub.Subscribe(ctx, dest)
	require.NoError(t, err)
	producer, err := timeouts.NewPublisher(pub, endpoint)
	require.NoError(t, err)

	msg := message.NewMessage(watermill.NewUUID(), []byte("from another process"))
	due := time.Now().Add(time.Second)
	timeouts.DeliverAt(msg, due)
	require.NoError(t, producer.Publish(dest, msg))

	select {
	case got := <-arrivals:
		got.Ack()
		require.Equal(t, msg.UUID, got.UUID)
		require.False(t, time.Now().Before(due))
	case code := <-done:
		t.Fatalf("service exited with %d: %s", code, stderr)
	case <-time.After(30 * time.Second):
		t.Fatal("not delivered")
	}
	stop()
	select {
	case code := <-done:
		require.Equal(t, 0, code, stderr)
	case <-time.After(15 * time.Second):
		t.Fatal("the service did not stop on its signal")
	}
}

func TestExactlyOnceIsRefusedAtStartWhereItCannotWork(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	start := time.Now()
	code, _, stderr := timeoutmill(context.Background(), "run", "--endpoint", "e", "--store", db,
		"--transport", "amqp://guest:topsecret@127.0.0.1:1/", "--exactly-once")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "exactly once needs the transport and the store on one PostgreSQL database")
	require.Contains(t, stderr, "RabbitMQ, which cannot take part in a database transaction")
	require.NotContains(t, stderr, "topsecret")
	require.Less(t, time.Since(start), 10*time.Second, "refused before connecting, not after the outage wait")
}

func TestRunExactlyOnceOverPostgreSQL(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDSN(t)
	endpoint := "cmdeo-" + watermill.NewShortUUID()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	done := make(chan int, 1)
	var stderr string
	go func() {
		var code int
		code, _, stderr = timeoutmill(ctx, "run", "--endpoint", endpoint, "--store", dsn, "--transport", dsn,
			"--exactly-once", "--close-timeout", "5s", "--log-level", "error")
		done <- code
	}()

	transport, err := connect.OpenTransport(ctx, dsn, watermill.NopLogger{})
	require.NoError(t, err)
	defer transport.Close()
	dest := endpoint + ".dest"
	arrivals, err := transport.Subscriber.Subscribe(ctx, dest)
	require.NoError(t, err)
	producer, err := timeouts.NewPublisher(transport.Publisher, endpoint)
	require.NoError(t, err)

	msg := message.NewMessage(watermill.NewUUID(), []byte("exactly once"))
	due := time.Now().Add(time.Second)
	timeouts.DeliverAt(msg, due)
	require.NoError(t, producer.Publish(dest, msg))

	select {
	case got := <-arrivals:
		got.Ack()
		require.Equal(t, msg.UUID, got.UUID)
		require.False(t, time.Now().Before(due))
	case code := <-done:
		t.Fatalf("service exited with %d: %s", code, stderr)
	case <-time.After(60 * time.Second):
		t.Fatal("not delivered")
	}
	select {
	case got := <-arrivals:
		t.Fatalf("delivered twice: %s", got.UUID)
	case <-time.After(2 * time.Second):
	}
	stop()
	select {
	case code := <-done:
		require.Equal(t, 0, code, stderr)
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not stop on its signal")
	}
}

// parseRun parses a run command line without running it.
func parseRun(t *testing.T, args ...string) runCmd {
	t.Helper()
	var c cli
	parser, err := newParser(&c, io.Discard, io.Discard, func(code int) { t.Fatalf("exit %d", code) })
	require.NoError(t, err)
	_, err = parser.Parse(append([]string{"run", "--endpoint", "e", "--store", "sqlite://t.db", "--transport", "amqp://h/"}, args...))
	require.NoError(t, err)
	return c.Run
}

func TestClaimLeaseReachesTheManager(t *testing.T) {
	t.Parallel()
	transport := &connect.Transport{}
	c := parseRun(t)
	require.Equal(t, timeouts.DefaultClaimLease, c.managerConfig(nil, transport, nil, nil).ClaimLease,
		"the flag's default is the library's")
	c = parseRun(t, "--claim-lease", "15s")
	require.Equal(t, 15*time.Second, c.managerConfig(nil, transport, nil, nil).ClaimLease)
}

func TestAnnouncementIDsReachTheManager(t *testing.T) {
	t.Parallel()
	transport := &connect.Transport{}
	c := parseRun(t)
	require.Equal(t, timeouts.DefaultAnnouncementIDs, c.managerConfig(nil, transport, nil, nil).AnnouncementIDs,
		"the flag's default is the library's")
	c = parseRun(t, "--announcement-ids", "1")
	require.Equal(t, 1, c.managerConfig(nil, transport, nil, nil).AnnouncementIDs, "the rolling upgrade's setting")
}

func TestInstanceReachesTheManager(t *testing.T) {
	t.Parallel()
	transport := &connect.Transport{}
	c := parseRun(t, "--instance", "orders-0")
	require.Equal(t, "orders-0", c.managerConfig(nil, transport, nil, nil).Instance)
	require.True(t, strings.HasSuffix(defaultInstance(), fmt.Sprintf("-%d", os.Getpid())), "the default names the process: new at each start")
}

func TestInstanceComesFromTheEnvironmentToo(t *testing.T) {
	t.Setenv("TIMEOUTMILL_INSTANCE", "orders-1")
	require.Equal(t, "orders-1", parseRun(t).Instance)
}

func TestClaimLeaseComesFromTheEnvironmentToo(t *testing.T) {
	t.Setenv("TIMEOUTMILL_CLAIM_LEASE", "2m30s")
	require.Equal(t, 150*time.Second, parseRun(t).ClaimLease)

	t.Setenv("TIMEOUTMILL_CLAIM_LEASE", "200ms")
	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	code, _, stderr := timeoutmill(context.Background(), "run", "--endpoint", "e", "--store", db, "--transport", "gochannel:")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--claim-lease 200ms is too short")
}

func TestTooShortClaimLeaseIsRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	for lease, shown := range map[string]string{"0s": "0s", "999ms": "999ms", "-1m": "-1m0s"} {
		start := time.Now()
		code, _, stderr := timeoutmill(context.Background(), "run", "--endpoint", "e",
			"--store", "postgres://app:topsecret@127.0.0.1:1/db?connect_timeout=1",
			"--transport", "amqp://guest:guest@127.0.0.1:1/", "--outage-wait", "1m", "--claim-lease="+lease)
		require.Equal(t, 1, code, lease)
		require.Contains(t, stderr, "--claim-lease "+shown+" is too short")
		require.Contains(t, stderr, "it must be at least 1s")
		require.Less(t, time.Since(start), 10*time.Second, "refused before connecting, not after the outage wait")
	}
}

func TestShortClaimLeaseIsWarnedAbout(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	code, _, stderr := timeoutmill(context.Background(), "run", "--endpoint", "e", "--store", db, "--transport", "gochannel:",
		"--claim-lease", "10s")
	require.Equal(t, 1, code, "refused for the transport, not the lease")
	require.Contains(t, stderr, "GoChannel lives inside one process")
	require.Contains(t, stderr, "--claim-lease is shorter than an announcement or a failing forward may take")
	require.Contains(t, stderr, "claim_lease=10s")

	code, _, stderr = timeoutmill(context.Background(), "run", "--endpoint", "e", "--store", db, "--transport", "gochannel:",
		"--claim-lease", "30s")
	require.Equal(t, 1, code)
	require.NotContains(t, stderr, "--claim-lease is shorter")
}
