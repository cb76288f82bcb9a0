package timeouts_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.Wrap(memory.New())
		rec := &criticalRecorder{}
		wait, poll := 600*time.Millisecond, 100*time.Millisecond
		b := setup(t, store, func(c *timeouts.Config) {
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = wait
			c.CallTimeout = time.Minute // no call returns before the wait: only the watch can trip
			c.RetryDelay = 50 * time.Millisecond
			c.PollInterval = poll // an idle poller looks at the store this often
			c.OnCriticalError = rec.action
		})

		hungAt := time.Now()
		store.Hang()
		t.Cleanup(store.Recover)           // lets the hanging calls go at the end
		time.Sleep(wait - time.Nanosecond) // advances virtual time to just before the wait
		synctest.Wait()
		require.Zero(t, rec.count(), "not before the wait")
		time.Sleep(poll + time.Nanosecond) // advances virtual time: the poller calls the store within a poll interval
		synctest.Wait()
		require.Equal(t, 1, rec.count(), "within a poll interval and the wait, though no call returned")

		rec.mu.Lock()
		e, at := rec.errs[0], rec.at[0]
		rec.mu.Unlock()
		require.Equal(t, "fetch", e.Breaker)
		require.Equal(t, critical.FetchMessage, e.Message)
		require.ErrorIs(t, e, critical.ErrNoAnswer)
		require.GreaterOrEqual(t, at.Sub(hungAt), wait, "not before the wait")
		require.LessOrEqual(t, at.Sub(hungAt), wait+poll, "within a poll interval and the wait")
		require.ErrorIs(t, b.manager.Err(), critical.ErrNoAnswer, "Manager.Err reports it")
		time.Sleep(2 * wait) // advances virtual time while the calls still hang
		synctest.Wait()
		require.Equal(t, 1, rec.count(), "exactly one critical error")
	})
}

// A store silent for less than the wait: calls past CallTimeout fail and are tried again, no
// critical error is raised, and every timeout is delivered once it answers again.
func TestStoreSilentForLessThanTheWaitLosesNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
		var msgs []*message.Message
		for range 5 {
			msg := message.NewMessage(watermill.NewUUID(), nil)
			timeouts.DeliverAfter(msg, 100*time.Millisecond)
			sent = append(sent, msg.UUID)
			msgs = append(msgs, msg)
		}
		// One Publish of all five: publishers side by side would wait on GoChannel's topic lock,
		// which stops virtual time.
		published := make(chan error, 1)
		go func() { published <- b.manager.Publisher().Publish("dest", msgs...) }()
		time.Sleep(1500 * time.Millisecond) // advances virtual time: several call deadlines, under half the wait
		require.Positive(t, store.FailedCalls(), "the silence was met")
		store.Recover()
		require.NoError(t, <-published)
		got := map[string]bool{}
		for range sent {
			got[await(t, delivered, 10*time.Second).msg.UUID] = true
		}
		for _, id := range sent {
			require.True(t, got[id], "timeout %s lost in the silence", id)
		}
		time.Sleep(3 * time.Second) // advances virtual time past the wait after the silence began
		synctest.Wait()
		require.Zero(t, rec.count(), "a silence shorter than the wait raises no critical error")
		require.NoError(t, b.manager.Err())
	})
}

// A steering call on a store that stopped answering fails after CallTimeout when its ctx has no
// deadline, and keeps a caller's shorter deadline; it never hangs.
func TestSteeringCallsOnAStoreThatStopsAnsweringFail(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.Wrap(memory.New())
		b := setup(t, store, func(c *timeouts.Config) {
			c.CallTimeout = 200 * time.Millisecond
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = time.Hour
			c.TimeToTriggerStoreCircuitBreaker = time.Hour
			c.TimeToTriggerDispatchCircuitBreaker = time.Hour
		})
		store.Hang()
		t.Cleanup(store.Recover)

		began := time.Now()
		_, err := b.manager.Cancel(context.Background(), watermill.NewUUID())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 200*time.Millisecond, time.Since(began), "fails after CallTimeout")
		_, err = b.manager.Get(context.Background(), watermill.NewUUID())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = b.manager.CancelByOwner(context.Background(), "saga-1")
		require.ErrorIs(t, err, context.DeadlineExceeded)

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = b.manager.Cancel(ctx, watermill.NewUUID())
		require.ErrorIs(t, err, context.Canceled, "the caller's own end still wins")
	})
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
	synctest.Test(t, func(t *testing.T) {
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
	})
}
