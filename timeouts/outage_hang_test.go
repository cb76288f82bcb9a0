package timeouts_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/faultstore"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// A store that stops answering (its packets dropped, not refused) fails no call: every call hangs.
// The critical error comes on time all the same, the wait after the calls began, although no call
// has returned by then (CallTimeout is longer than the wait here), and the router closes.
func TestStoreThatStopsAnsweringRaisesTheCriticalErrorOnTime(t *testing.T) {
	t.Parallel()
	store := faultstore.Wrap(memory.New())
	rec := &criticalRecorder{}
	wait := 600 * time.Millisecond
	b := setup(t, store, func(c *timeouts.Config) {
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = wait
		c.CallTimeout = time.Minute // no call returns before the wait: only the watch can trip
		c.RetryDelay = 50 * time.Millisecond
		c.PollInterval = 100 * time.Millisecond // an idle poller looks at the store this often
		c.OnCriticalError = rec.action
	})

	hungAt := time.Now()
	store.Hang()
	t.Cleanup(store.Recover) // lets the hanging calls go at the end
	require.Eventually(t, func() bool { return rec.count() >= 1 }, 10*time.Second, 5*time.Millisecond)

	rec.mu.Lock()
	e, at := rec.errs[0], rec.at[0]
	rec.mu.Unlock()
	require.Equal(t, "fetch", e.Breaker)
	require.Equal(t, critical.FetchMessage, e.Message)
	require.ErrorIs(t, e, critical.ErrNoAnswer)
	require.GreaterOrEqual(t, at.Sub(hungAt), wait, "not before the wait")
	require.Less(t, at.Sub(hungAt), wait+100*time.Millisecond+2*time.Second, "within poll interval + wait + 2 s, though no call returned")
	require.ErrorIs(t, b.manager.Err(), critical.ErrNoAnswer, "Manager.Err reports it")
	time.Sleep(2 * wait)
	require.Equal(t, 1, rec.count(), "exactly one critical error")
}

// A store silent for less than the wait: calls past CallTimeout fail and are tried again, no
// critical error is raised, and every timeout is delivered once it answers again.
func TestStoreSilentForLessThanTheWaitLosesNothing(t *testing.T) {
	t.Parallel()
	store := faultstore.Wrap(memory.New())
	rec := &criticalRecorder{}
	b := setup(t, store, func(c *timeouts.Config) {
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = 4 * time.Second
		c.TimeToTriggerStoreCircuitBreaker = 4 * time.Second
		c.TimeToTriggerDispatchCircuitBreaker = 4 * time.Second
		c.CallTimeout = 300 * time.Millisecond
		c.RetryDelay = 50 * time.Millisecond
		c.PollInterval = 100 * time.Millisecond
		c.OnCriticalError = rec.action
	})
	delivered := subscribe(t, b.pubSub, "dest")

	store.Hang()
	var sent []string
	published := make(chan error, 5)
	for range 5 {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(msg, 100*time.Millisecond)
		sent = append(sent, msg.UUID)
		go func() { published <- b.manager.Publisher().Publish("dest", msg) }()
	}
	time.Sleep(1500 * time.Millisecond) // several call deadlines, under half the wait
	require.Positive(t, store.FailedCalls(), "the silence was met")
	store.Recover()
	for range sent {
		require.NoError(t, <-published)
	}
	got := map[string]bool{}
	for range sent {
		got[await(t, delivered, 10*time.Second).msg.UUID] = true
	}
	for _, id := range sent {
		require.True(t, got[id], "timeout %s lost in the silence", id)
	}
	time.Sleep(3 * time.Second) // past the wait after the silence began
	require.Zero(t, rec.count(), "a silence shorter than the wait raises no critical error")
	require.NoError(t, b.manager.Err())
}

// A steering call on a store that stopped answering fails after CallTimeout when its ctx has no
// deadline, and keeps a caller's shorter deadline; it never hangs.
func TestSteeringCallsOnAStoreThatStopsAnsweringFail(t *testing.T) {
	t.Parallel()
	store := faultstore.Wrap(memory.New())
	b := setup(t, store, func(c *timeouts.Config) {
		c.CallTimeout = 200 * time.Millisecond
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = time.Hour
		c.TimeToTriggerStoreCircuitBreaker = time.Hour
		c.TimeToTriggerDispatchCircuitBreaker = time.Hour
	})
	store.Hang()
	t.Cleanup(store.Recover)

	_, err := b.manager.Cancel(context.Background(), watermill.NewUUID())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = b.manager.Get(context.Background(), watermill.NewUUID())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = b.manager.CancelByOwner(context.Background(), "saga-1")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.manager.Cancel(ctx, watermill.NewUUID())
	require.ErrorIs(t, err, context.Canceled, "the caller's own end still wins")
}

// lostAnswerStore commits a claim and then loses its answer once, as a database does whose reply
// a dropped packet took: the ids are claimed, and the poller does not know them.
type lostAnswerStore struct {
	memStore
	lose atomic.Bool
}

func (s *lostAnswerStore) ClaimDueAs(ctx context.Context, instance string, now time.Time, limit int, lease time.Duration) ([]string, error) {
	ids, err := s.memStore.ClaimDueAs(ctx, instance, now, limit, lease)
	if err == nil && len(ids) > 0 && s.lose.CompareAndSwap(true, false) {
		return nil, fmt.Errorf("claim answer lost with %d ids: %w", len(ids), context.DeadlineExceeded)
	}
	return ids, err
}

// The ids of a claim whose answer was lost are given back before the next claim, and delivered
// at once rather than when their lease (an hour here) runs out.
func TestClaimWhoseAnswerWasLostIsGivenBack(t *testing.T) {
	t.Parallel()
	store := &lostAnswerStore{memStore: memory.New().(memStore)}
	store.lose.Store(true)
	b := setup(t, store, func(c *timeouts.Config) {
		c.Instance = "orders-0"
		c.ClaimLease = time.Hour
		c.RetryDelay = 50 * time.Millisecond
		c.PollInterval = 100 * time.Millisecond
	})
	delivered := subscribe(t, b.pubSub, "dest")

	msg := message.NewMessage(watermill.NewUUID(), nil)
	timeouts.DeliverAfter(msg, 100*time.Millisecond)
	require.NoError(t, b.manager.Publisher().Publish("dest", msg))
	got := await(t, delivered, 10*time.Second)
	require.Equal(t, msg.UUID, got.msg.UUID)
	require.False(t, store.lose.Load(), "the answer of a claim was lost")
}
