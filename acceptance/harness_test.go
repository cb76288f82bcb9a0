package acceptance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// backend is a durable store the scenarios run on.
type backend struct {
	name string
	// database makes an empty database for endpoint and returns a function that opens a store on
	// it. Each call opens a new store, as another process would; every store is closed when the
	// test ends.
	database func(t *testing.T, endpoint string) func(t *testing.T) persistence.Store
}

// backends are the stores every scenario runs on, with RabbitMQ as the transport.
func backends() []backend {
	return []backend{
		{name: "sqlite", database: func(t *testing.T, endpoint string) func(t *testing.T) persistence.Store {
			path := filepath.Join(t.TempDir(), "timeouts.db")
			return func(t *testing.T) persistence.Store {
				s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Endpoint: endpoint})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, s.Close()) })
				return s
			}
		}},
		{name: "postgres", database: func(t *testing.T, endpoint string) func(t *testing.T) persistence.Store {
			dsn, schema := testenv.PostgresSchema(t)
			return func(t *testing.T) persistence.Store {
				s, err := postgres.Open(context.Background(), postgres.Config{DSN: dsn, Schema: schema, Endpoint: endpoint})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, s.Close()) })
				return s
			}
		}},
	}
}

// forEachBackend runs scenario on RabbitMQ with each store, in parallel.
func forEachBackend(t *testing.T, scenario func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			scenario(t, b)
		})
	}
}

// env is one test's endpoint on the broker.
type env struct {
	url        string
	endpoint   string
	errorQueue string
	raw        *amqp.Connection // plain amqp091, to look behind the transport and to play a non-Go producer

	// consumers is amqptransport.Config.Consumers of the nodes started after it is set.
	consumers int

	mu     sync.Mutex
	queues []string // the test's queues, deleted when it ends
}

// newEnv gives t an endpoint of its own (acc-<tag>-<random>) and deletes every queue named after
// it when t ends.
func newEnv(t *testing.T, tag string) *env {
	t.Helper()
	url := testenv.AMQPURL(t)
	raw, err := amqp.Dial(url)
	require.NoError(t, err)
	endpoint := "acc-" + tag + "-" + randomHex(t, 4)
	e := &env{url: url, endpoint: endpoint, errorQueue: endpoint + ".error", raw: raw}
	e.queues = []string{wire.TimeoutsQueue(endpoint), wire.DispatcherQueue(endpoint), e.errorQueue}
	t.Cleanup(func() {
		_ = raw.Close()
		// A connection of its own: the test may have had the broker drop raw.
		conn, err := amqp.Dial(url)
		require.NoError(t, err)
		defer conn.Close()
		e.mu.Lock()
		defer e.mu.Unlock()
		deleteQueues(t, conn, e.queues)
	})
	return e
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// queue names a queue of this test's, a destination say, to be deleted when the test ends.
func (e *env) queue(name string) string {
	q := e.endpoint + "." + name
	e.mu.Lock()
	e.queues = append(e.queues, q)
	e.mu.Unlock()
	return q
}

func (e *env) config(role string) amqptransport.Config {
	return amqptransport.Config{URL: e.url, ConnectionName: e.endpoint + " " + role, Consumers: e.consumers}
}

// channel runs use on a fresh channel of the plain connection.
func (e *env) channel(t *testing.T, use func(ch *amqp.Channel) error) error {
	t.Helper()
	ch, err := e.raw.Channel()
	require.NoError(t, err)
	err = use(ch)
	if !ch.IsClosed() {
		_ = ch.Close()
	}
	return err
}

// publishRaw publishes to queue as a plain AMQP client (not Watermill) would.
func (e *env) publishRaw(t *testing.T, queue string, p amqp.Publishing) {
	t.Helper()
	require.NoError(t, e.channel(t, func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, p)
		if err != nil {
			return err
		}
		if ok, err := conf.WaitContext(context.Background()); err != nil || !ok {
			return errors.Join(errors.New("not confirmed"), err)
		}
		return nil
	}))
}

// messageCount is how many messages are ready in queue (0 when it does not exist).
func (e *env) messageCount(t *testing.T, queue string) int {
	t.Helper()
	n := 0
	err := e.channel(t, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return 0
	}
	require.NoError(t, err)
	return n
}

// deleteQueues deletes queues, those that exist.
func deleteQueues(t *testing.T, conn *amqp.Connection, queues []string) {
	t.Helper()
	for _, q := range queues {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDelete(q, false, false, false)
		require.NoError(t, err, "deleting queue %s", q)
		require.NoError(t, ch.Close())
	}
}

// queuesWithPrefix lists the broker's queues whose names start with prefix, with the test node's
// rabbitmqctl (which the env file of scripts/services.sh names); nil without it.
func queuesWithPrefix(t *testing.T, prefix string) []string {
	t.Helper()
	ctl := os.Getenv("TIMEOUTMILL_RABBITMQCTL")
	if ctl == "" {
		return nil
	}
	out, err := exec.Command(ctl, "-q", "list_queues", "--no-table-headers", "name").Output()
	require.NoError(t, err, "rabbitmqctl list_queues")
	var names []string
	for _, name := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}

// node is one running instance of the endpoint's timeout manager, as a `timeoutmill run`
// process would be: its own connections, its own router, its own store handle.
type node struct {
	manager *timeouts.Manager
	router  *message.Router
	pub     *amqptransport.Publisher
}

// startNode runs a timeout manager for e's endpoint on store; mutate adjusts its config.
func startNode(t *testing.T, e *env, name string, store persistence.Store, mutate func(*timeouts.Config)) *node {
	t.Helper()
	logger := testLogger()
	pub, sub, err := amqptransport.New(e.config(name), logger)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	require.NoError(t, pub.DeclareEndpoint(context.Background(), e.endpoint, e.errorQueue))

	cfg := timeouts.Config{
		Endpoint:   e.endpoint,
		Store:      store,
		Publisher:  pub,
		Subscriber: sub,
		ErrorQueue: e.errorQueue,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	manager, err := timeouts.NewManager(cfg, logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 15 * time.Second}, logger)
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var runErr error
	go func() {
		defer close(stopped)
		runErr = router.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		_ = router.Close() // closes the subscriber too
		<-stopped
		<-manager.Done()
		require.NoError(t, manager.Err(), "no critical error")
	})
	select {
	case <-router.Running():
	case <-stopped:
		t.Fatalf("router stopped at start: %v", runErr)
	}
	return &node{manager: manager, router: router, pub: pub}
}

// testLogger logs to stderr when TIMEOUTMILL_TEST_LOG is set (debug when it is "debug").
func testLogger() watermill.LoggerAdapter {
	switch os.Getenv("TIMEOUTMILL_TEST_LOG") {
	case "":
		return watermill.NopLogger{}
	case "debug":
		return watermill.NewStdLogger(true, false)
	default:
		return watermill.NewStdLogger(false, false)
	}
}

// arrival is a message received on a destination, stamped on arrival.
type arrival struct {
	msg *message.Message
	at  time.Time
}

// receive consumes queue on a connection of its own and returns arrivals as they come.
func receive(t *testing.T, e *env, queue string) <-chan arrival {
	t.Helper()
	sub, err := amqptransport.NewSubscriber(e.config("receiver "+queue), testLogger())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(ctx, queue)
	require.NoError(t, err)
	out := make(chan arrival, 4096)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range msgs {
			out <- arrival{msg: m, at: time.Now()}
			m.Ack()
		}
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sub.Close())
		wg.Wait()
	})
	return out
}

func await(t *testing.T, ch <-chan arrival, within time.Duration) arrival {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return arrival{}
	}
}

func requireNothing(t *testing.T, ch <-chan arrival, during time.Duration) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("unexpected message %s (%v)", a.msg.UUID, a.msg.Metadata)
	case <-time.After(during):
	}
}

// pending is how many timeouts the store holds.
func pending(t *testing.T, store persistence.Store) int {
	t.Helper()
	st, err := store.(persistence.Inspector).Stats(context.Background(), time.Now())
	require.NoError(t, err)
	return st.Pending
}

// stallBound is how long a test waits for the next of many deliveries once they are due: it
// bounds a stall, not the drain, which on a loaded machine may take minutes.
const stallBound = 2 * time.Minute

// untilDue is how long until due, or 0 once it has passed.
func untilDue(due time.Time) time.Duration {
	return max(time.Until(due), 0)
}
