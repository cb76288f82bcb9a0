package timeouts_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/faultstore"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

type criticalRecorder struct {
	mu   sync.Mutex
	errs []*timeouts.CriticalError
	at   []time.Time
}

func (r *criticalRecorder) action(_ context.Context, e *timeouts.CriticalError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, e)
	r.at = append(r.at, time.Now())
}

func (r *criticalRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

// The outage tests run in a synctest bubble on the memory store and a GoChannel: time is virtual,
// a sleep advances it, and synctest.Wait lets every goroutine settle before the test looks.

func TestStorageOutageShorterThanWaitRaisesNothingAndLosesNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.Wrap(memory.New())
		rec := &criticalRecorder{}
		b := setup(t, store, func(c *timeouts.Config) {
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = 2 * time.Second
			c.TimeToTriggerStoreCircuitBreaker = 2 * time.Second
			c.TimeToTriggerDispatchCircuitBreaker = 2 * time.Second
			c.RetryDelay = 50 * time.Millisecond
			c.PollInterval = 100 * time.Millisecond
			c.OnCriticalError = rec.action
		})
		delivered := subscribe(t, b.pubSub, "dest")

		store.Fail()
		var msgs []*message.Message
		for range 5 {
			msg := message.NewMessage(watermill.NewUUID(), nil)
			timeouts.DeliverAfter(msg, 100*time.Millisecond)
			msgs = append(msgs, msg)
		}
		// On a GoChannel that waits for acks, Publish returns once the timeouts are stored: after
		// the outage. One Publish of all five: publishers side by side would wait on GoChannel's
		// topic lock, which stops virtual time.
		published := make(chan error, 1)
		go func() { published <- b.manager.Publisher().Publish("dest", msgs...) }()
		time.Sleep(time.Second) // advances virtual time by half the wait
		require.Positive(t, store.FailedCalls(), "the outage was noticed")
		select {
		case err := <-published:
			t.Fatalf("Publish returned during the outage: %v", err)
		default:
		}
		store.Recover()
		require.NoError(t, <-published)

		got := map[string]bool{}
		for range msgs {
			got[await(t, delivered, 10*time.Second).msg.UUID] = true
		}
		for _, msg := range msgs {
			require.True(t, got[msg.UUID], "timeout %s lost in the outage", msg.UUID)
		}
		time.Sleep(2500 * time.Millisecond) // advances virtual time past the wait after the outage began
		synctest.Wait()
		require.Zero(t, rec.count(), "an outage shorter than the wait raises no critical error")
		require.NoError(t, b.manager.Err())
	})
}

func TestStorageOutageLongerThanWaitRaisesOneCriticalError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.Wrap(memory.New())
		rec := &criticalRecorder{}
		wait, poll := 600*time.Millisecond, 100*time.Millisecond
		b := setup(t, store, func(c *timeouts.Config) {
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = wait
			c.RetryDelay = 50 * time.Millisecond
			// An idle poller notices an outage at its next look at the store; look often.
			c.PollInterval = poll
			c.OnCriticalError = rec.action
		})

		failedAt := time.Now()
		store.Fail()
		time.Sleep(wait - time.Nanosecond) // advances virtual time to just before the wait
		synctest.Wait()
		require.Zero(t, rec.count(), "not before the wait")
		time.Sleep(poll + time.Nanosecond) // advances virtual time: the poller looks at the store within a poll interval
		synctest.Wait()
		require.Equal(t, 1, rec.count(), "within a poll interval and the wait")
		time.Sleep(3 * wait) // advances virtual time: the outage goes on
		synctest.Wait()
		require.Equal(t, 1, rec.count(), "exactly one critical error per outage")

		rec.mu.Lock()
		e, at := rec.errs[0], rec.at[0]
		rec.mu.Unlock()
		require.Equal(t, "fetch", e.Breaker)
		require.Equal(t, "Repeated failures when fetching timeouts from storage, endpoint will be terminated.", e.Message)
		require.ErrorIs(t, e, faultstore.ErrOutage)
		require.GreaterOrEqual(t, at.Sub(failedAt), wait, "not before the wait")
		require.LessOrEqual(t, at.Sub(failedAt), wait+poll, "within the poll interval and the wait")

		var ce *timeouts.CriticalError
		require.True(t, errors.As(b.manager.Err(), &ce))
	})
}

func TestDefaultCriticalErrorActionClosesTheRouter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.Wrap(memory.New())
		wait, poll := 300*time.Millisecond, 100*time.Millisecond
		b := setup(t, store, func(c *timeouts.Config) {
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = wait
			c.RetryDelay = 50 * time.Millisecond
			c.PollInterval = poll
		})
		store.Fail()
		time.Sleep(wait + poll) // advances virtual time past the wait
		synctest.Wait()
		require.True(t, b.router.IsClosed(), "the default action closes the router")
		require.ErrorContains(t, b.manager.Err(), "Repeated failures when fetching timeouts from storage")
	})
}
