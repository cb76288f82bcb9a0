package timeouts_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// countingLogger records the messages logged at Info and above, for tests that check a line was
// written (and how often).
type countingLogger struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newCountingLogger() countingLogger { return countingLogger{mu: &sync.Mutex{}, msgs: &[]string{}} }

func (l countingLogger) add(msg string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		msg += ": " + err.Error()
	}
	*l.msgs = append(*l.msgs, msg)
}

func (l countingLogger) Error(msg string, err error, _ watermill.LogFields) { l.add(msg, err) }
func (l countingLogger) Info(msg string, _ watermill.LogFields)             { l.add(msg, nil) }
func (l countingLogger) Debug(string, watermill.LogFields)                  {}
func (l countingLogger) Trace(string, watermill.LogFields)                  {}
func (l countingLogger) With(watermill.LogFields) watermill.LoggerAdapter   { return l }

// count returns how many logged messages contain part.
func (l countingLogger) count(part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range *l.msgs {
		if strings.Contains(m, part) {
			n++
		}
	}
	return n
}

// running is a manager whose router runs; stopped is closed when its Run returned.
type running struct {
	manager *timeouts.Manager
	router  *message.Router
	stopped chan struct{}
	runErr  error
}

// run starts a manager for endpoint on pubSub and store as instance, logging to logger; unlike
// start, it does not require the manager to run (a twin's start is refused).
func run(t *testing.T, pubSub *gochannel.GoChannel, store persistence.Store, instance string, logger watermill.LoggerAdapter) *running {
	t.Helper()
	r := prepare(t, pubSub, store, instance, logger)
	r.run(t)
	return r
}

// prepare makes the manager and router of run without running them. NewManager's check that the
// store was opened reads the store's fields: make a second manager of a store before the first
// uses it.
func prepare(t *testing.T, pubSub *gochannel.GoChannel, store persistence.Store, instance string, logger watermill.LoggerAdapter) *running {
	t.Helper()
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint: endpoint, Store: store, Publisher: pubSub, Subscriber: pubSub,
		RetryDelay: 20 * time.Millisecond, Instance: instance,
	}, logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))
	return &running{manager: manager, router: router, stopped: make(chan struct{})}
}

// run runs the router until the test ends.
func (r *running) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(r.stopped)
		r.runErr = r.router.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		_ = r.router.Close()
		<-r.stopped
		<-r.manager.Done()
	})
}

func newPubSub(t *testing.T) *gochannel.GoChannel {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	return pubSub
}

// storeDue stores a timeout due now for destination.
func storeDue(t *testing.T, store persistence.Store, id, destination string) {
	t.Helper()
	_, err := store.Store(context.Background(), persistence.Timeout{ID: id, Destination: destination, Due: time.Now(), Payload: []byte(id)})
	require.NoError(t, err)
}

// claimAs claims every due timeout as instance with lease, as a run that is then killed would.
// memStore is the memory store with the optional interfaces it implements.
type memStore interface {
	persistence.Store
	persistence.BatchStore
	persistence.Scheduler
	persistence.Inspector
	persistence.Releaser
	persistence.Handover
	persistence.Claimer
	persistence.Parker
}

func claimAs(t *testing.T, store persistence.Claimer, instance string, lease time.Duration) []string {
	t.Helper()
	ids, err := store.ClaimDueAs(context.Background(), instance, time.Now(), 100, lease)
	require.NoError(t, err)
	return ids
}

// The manager holds its name while it runs, and lets it go when it stops.
func TestInstanceNameIsHeldWhileTheManagerRuns(t *testing.T) {
	t.Parallel()
	store := memory.New().(memStore)
	r := run(t, newPubSub(t), store, "node-0", nil)
	<-r.manager.Ready()

	_, err := store.HoldInstance(context.Background(), "node-0")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse, "held while the manager runs")
	other, err := store.HoldInstance(context.Background(), "node-1")
	require.NoError(t, err, "another name is free")
	require.NoError(t, other())

	require.NoError(t, r.router.Close())
	<-r.manager.Done()
	release, err := store.HoldInstance(context.Background(), "node-0")
	require.NoError(t, err, "let go at the stop")
	require.NoError(t, release())
	require.NoError(t, r.manager.Err())
}

// What a killed run of a name claimed and never announced is delivered as soon as a run of the
// same name starts, not when its lease runs out; another instance's claim still waits for its
// lease.
func TestInstanceRestartTakesItsOwnClaimsBackAtOnce(t *testing.T) {
	t.Parallel()
	store := memory.New().(memStore)
	storeDue(t, store, "mine", "recovered")
	require.Equal(t, []string{"mine"}, claimAs(t, store, "node-0", time.Hour))
	storeDue(t, store, "theirs", "recovered")
	require.Equal(t, []string{"theirs"}, claimAs(t, store, "node-1", time.Hour))

	pubSub := newPubSub(t)
	delivered := subscribe(t, pubSub, "recovered")
	logger := newCountingLogger()
	started := time.Now()
	r := run(t, pubSub, store, "node-0", logger)

	got := await(t, delivered, 30*time.Second) // the lease is an hour
	require.Equal(t, "mine", got.msg.UUID)
	t.Logf("the earlier run's claim delivered %s after the start (its lease: 1 h)", got.at.Sub(started).Round(time.Millisecond))
	requireNothing(t, delivered, time.Second) // node-1's claim waits for its lease
	require.Equal(t, 1, logger.count("Gave back the claims an earlier run of this instance left"))
	pending, err := store.Peek(context.Background(), "theirs")
	require.NoError(t, err, "another instance's claim is left alone")
	require.Equal(t, "theirs", pending.ID)
	require.NoError(t, r.manager.Err())
}

// A second manager with the name of a running one is refused at its start: its Err names the
// instance and wraps persistence.ErrInstanceInUse, it handles and gives back nothing, and the
// first keeps running and delivering.
func TestInstanceTwinIsRefused(t *testing.T) {
	t.Parallel()
	store := memory.New().(memStore)
	pubSub := newPubSub(t)
	delivered := subscribe(t, pubSub, "twins")
	logger := newCountingLogger()
	// Another process, with a connection of its own: a router closes its subscriber.
	twin := prepare(t, newPubSub(t), store, "twin", logger)
	first := run(t, pubSub, store, "twin", nil)
	<-first.manager.Ready()
	// A claim the first run holds, announced to nobody: the twin must not give it back.
	storeDue(t, store, "held-by-first", "twins")
	require.Equal(t, []string{"held-by-first"}, claimAs(t, store, "twin", time.Hour))

	twin.run(t)
	select {
	case <-twin.manager.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the twin did not stop")
	}
	<-twin.stopped
	err := twin.manager.Err()
	require.ErrorIs(t, err, persistence.ErrInstanceInUse)
	require.Contains(t, err.Error(), `"twin"`)
	require.Contains(t, err.Error(), endpoint)
	require.NoError(t, twin.runErr)
	select {
	case <-twin.manager.Ready():
		t.Fatal("a refused twin is never ready")
	default:
	}
	require.Zero(t, logger.count("Gave back the claims"))
	require.Equal(t, 1, logger.count("The manager cannot start"))

	msg := message.NewMessage(watermill.NewUUID(), []byte("after the twin"))
	timeouts.DeliverAfter(msg, 200*time.Millisecond)
	require.NoError(t, first.manager.Publisher().Publish("twins", msg))
	got := await(t, delivered, 30*time.Second)
	require.Equal(t, msg.UUID, got.msg.UUID, "the first delivers on")
	requireNothing(t, delivered, time.Second) // the first run's claim was not given back
	require.NoError(t, first.manager.Err())

	// The twin's refusal let nothing go: the name is still the first's.
	_, err = store.HoldInstance(context.Background(), "twin")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse)
}

// withoutClaimer hides every optional interface of a store, Claimer among them.
type withoutClaimer struct{ storeIface }

// On a store that does not record who claimed what, the name changes nothing: the manager says so
// once, and a killed run's claims wait for their lease.
func TestInstanceOnAStoreWithoutClaimerWaitsForTheLease(t *testing.T) {
	t.Parallel()
	inner := memory.New().(memStore)
	storeDue(t, inner, "leased", "later")
	lease := 1500 * time.Millisecond
	claimedAt := time.Now()
	require.Equal(t, []string{"leased"}, claimAs(t, inner, "node-0", lease))

	pubSub := newPubSub(t)
	delivered := subscribe(t, pubSub, "later")
	logger := newCountingLogger()
	r := run(t, pubSub, withoutClaimer{inner}, "node-0", logger)
	got := await(t, delivered, 30*time.Second)
	require.Equal(t, "leased", got.msg.UUID)
	require.GreaterOrEqual(t, got.at.Sub(claimedAt), lease, "not before the lease ran out")
	require.Equal(t, 1, logger.count("the instance name does not speed up recovery"))
	require.NoError(t, r.manager.Err())
}

func TestInstanceNameIsValidated(t *testing.T) {
	t.Parallel()
	base := timeouts.Config{Endpoint: endpoint, Store: memory.New(), Publisher: newPubSub(t), Subscriber: newPubSub(t)}
	for name, instance := range map[string]string{
		"too long":      strings.Repeat("n", persistence.MaxIDLength+1),
		"control":       "node\n0",
		"white space":   "  ",
		"invalid UTF-8": "node-\xff",
	} {
		cfg := base
		cfg.Instance = instance
		err := cfg.Validate()
		require.ErrorIs(t, err, timeouts.ErrInvalidConfig, name)
		require.Contains(t, err.Error(), "Instance", name)
	}
	for _, instance := range []string{"", "orders-0", strings.Repeat("n", persistence.MaxIDLength), "nœud-0"} {
		cfg := base
		cfg.Instance = instance
		require.NoError(t, cfg.Validate(), instance)
	}
}
