package timeouts_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

func openSQLite(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	store, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Endpoint: endpoint})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// claimWatcher tells of every ClaimDue call, with the instant it claimed at and the ids it got, so
// that a test on a real store waits for the poller's looks at it rather than for the wall clock.
type claimWatcher struct {
	inner
	calls chan claimCall
}

type claimCall struct {
	now time.Time
	ids []string
}

func (c *claimWatcher) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	ids, err := c.inner.ClaimDue(ctx, now, limit, lease)
	if err == nil {
		select {
		case c.calls <- claimCall{now: now, ids: ids}:
		default: // the test has seen enough
		}
	}
	return ids, err
}

// A poller that claimed ids and died before announcing them (or whose dispatcher messages were
// lost with a non-durable broker) leaves claims behind; they are delivered once the lease runs out.
// SQLite does real I/O, so this test runs outside a synctest bubble: the lease runs out on the
// manager's clock (Config.Clock), which the test sets on, and the test waits for the poller's
// claims, not for the wall clock.
func TestClaimLostInACrashIsRecoveredWhenItsLeaseRunsOut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	ctx := context.Background()

	crashed := openSQLite(t, path)
	_, err := crashed.Store(ctx, persistence.Timeout{
		ID: "lost-in-crash", Destination: "recovered", Due: time.Now().Add(-time.Second),
		Payload: []byte("still here"), Metadata: map[string]string{"k": "v"},
	})
	require.NoError(t, err)
	lease := time.Hour
	claimedAt := time.Now()
	ids, err := crashed.ClaimDue(ctx, claimedAt, 10, lease)
	require.NoError(t, err)
	require.Equal(t, []string{"lost-in-crash"}, ids)
	require.NoError(t, crashed.Close()) // the process dies; nothing was announced

	clock := &skewedClock{}
	store := &claimWatcher{inner: openSQLite(t, path), calls: make(chan claimCall, 1024)}
	b := setup(t, store, func(c *timeouts.Config) {
		c.ClaimLease = lease
		c.PollInterval = 50 * time.Millisecond
		c.Clock = clock
	})
	delivered := subscribe(t, b.pubSub, "recovered")
	first := awaitClaim(t, store.calls)
	require.Empty(t, first.ids, "not handed out again while the lease runs")

	clock.set(lease) // the lease runs out on the manager's clock
	for {
		c := awaitClaim(t, store.calls)
		if len(c.ids) > 0 {
			require.Equal(t, []string{"lost-in-crash"}, c.ids)
			require.GreaterOrEqual(t, c.now.Sub(claimedAt), lease, "not handed out again while the lease runs")
			break
		}
	}
	got := await(t, delivered, 10*time.Second)
	require.Equal(t, "lost-in-crash", got.msg.UUID)
	require.Equal(t, "still here", string(got.msg.Payload))
	require.Equal(t, "v", got.msg.Metadata.Get("k"))

	// Once the manager has stopped, every forward it made has reached the subscriber (GoChannel
	// waits for the subscriber's ack, which comes after the arrival is queued): one, no other.
	require.NoError(t, b.router.Close())
	<-b.manager.Done()
	requireNoneQueued(t, delivered)
}

// setupSubscribed runs a manager as setup does, with topic subscribed before it starts: on a
// GoChannel a destination without a subscriber drops what is forwarded to it, and a Subscribe
// made while the manager forwards waits for the publishes in flight, which may wait for it.
func setupSubscribed(t *testing.T, store persistence.Store, topic string, mutate func(*timeouts.Config)) (*testBundle, <-chan arrival) {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	arrivals := subscribe(t, pubSub, topic)
	return start(t, pubSub, store, mutate), arrivals
}

// requireNoneQueued fails t if ch holds an arrival, without waiting.
func requireNoneQueued(t *testing.T, ch <-chan arrival) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("unexpected message %s (%v)", a.msg.UUID, a.msg.Metadata)
	default:
	}
}

// awaitClaim returns the poller's next ClaimDue call.
func awaitClaim(t *testing.T, calls <-chan claimCall) claimCall {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the poller made no claim within 10 s")
		return claimCall{}
	}
}

// A process stopped while it forwards, and restarted, delivers every timeout, none twice but
// those the stop overlapped. SQLite does real I/O, so this test runs outside a synctest bubble: the
// processes' clocks (Config.Clock) run ahead of the due times instead of the test waiting for them.
func TestPipelineOnSQLiteSurvivesRestartMidFlight(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")

	// Ids the first process claimed just before it stopped keep their lease: keep it short. Its
	// clock is 600 ms ahead: a third of the timeouts are due as they are stored.
	first := setup(t, openSQLite(t, path), func(c *timeouts.Config) {
		c.ClaimLease = time.Second
		c.Clock = &skewedClock{off: 600 * time.Millisecond}
	})
	beforeStop := subscribe(t, first.pubSub, "mid-flight")
	want := map[string]bool{}
	for i := range 50 {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(msg, time.Duration(300+20*i)*time.Millisecond)
		require.NoError(t, first.manager.Publisher().Publish("mid-flight", msg))
		want[msg.UUID] = true
	}
	// On a GoChannel that waits for acks, each Publish returned once its timeout was stored.
	st, err := first.store.(persistence.Inspector).Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.LessOrEqual(t, st.Pending, len(want), "all stored, some maybe delivered already")
	require.NoError(t, first.router.Close()) // some due, most not yet
	<-first.manager.Done()
	require.NoError(t, first.store.Close())

	// Every forward the stopped manager made has reached beforeStop: GoChannel waits for the
	// subscriber's ack, which comes after the arrival is queued. A forward the stop cut short
	// kept its timeout, which the restart delivers.
	deliveredBefore := map[string]bool{}
	for len(beforeStop) > 0 {
		id := (<-beforeStop).msg.UUID
		deliveredBefore[id] = true
		delete(want, id)
	}

	// Every id not delivered yet arrives after the restart. A forward the stop overlapped may
	// arrive again: on a GoChannel, a Publish that returned while the router was closing cannot
	// tell a message its subscriber took from one the closing discarded, so its timeout is kept
	// (at least once). Nothing else arrives, and nothing arrives twice more.
	// The second process's clock is past every due time and the first one's leases.
	second, delivered := setupSubscribed(t, openSQLite(t, path), "mid-flight", func(c *timeouts.Config) {
		c.ClaimLease = time.Second
		c.Clock = &skewedClock{off: 3 * time.Second}
	})
	again := map[string]bool{}
	check := func(id string) {
		switch {
		case want[id]:
			delete(want, id)
		case deliveredBefore[id] && !again[id]:
			again[id] = true
		default:
			t.Fatalf("unexpected or duplicate %s (delivered before the stop: %v)", id, deliveredBefore[id])
		}
	}
	for len(want) > 0 {
		check(await(t, delivered, 10*time.Second).msg.UUID)
	}
	// Once the second manager has stopped, whatever it forwarded has arrived.
	require.NoError(t, second.router.Close())
	<-second.manager.Done()
	for len(delivered) > 0 {
		check((<-delivered).msg.UUID)
	}
	t.Logf("delivered before the stop: %d; after the restart: %d more and %d again", len(deliveredBefore), 50-len(deliveredBefore), len(again))
}
