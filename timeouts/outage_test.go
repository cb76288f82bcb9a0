package timeouts_test

import (
	"context"
	"errors"
	"sync"
	"testing"
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

func TestStorageOutageShorterThanWaitRaisesNothingAndLosesNothing(t *testing.T) {
	t.Parallel()
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
	var sent []string
	published := make(chan error, 5)
	for range 5 {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(msg, 100*time.Millisecond)
		sent = append(sent, msg.UUID)
		// On a GoChannel that waits for acks, Publish returns once the timeout is stored: after
		// the outage.
		go func() { published <- b.manager.Publisher().Publish("dest", msg) }()
	}
	time.Sleep(time.Second) // half the wait
	require.Positive(t, store.FailedCalls(), "the outage was noticed")
	store.Recover()
	for range sent {
		require.NoError(t, <-published)
	}

	got := map[string]bool{}
	for range sent {
		got[await(t, delivered, 10*time.Second).msg.UUID] = true
	}
	for _, id := range sent {
		require.True(t, got[id], "timeout %s lost in the outage", id)
	}
	time.Sleep(2500 * time.Millisecond) // past the wait after the outage began
	require.Zero(t, rec.count(), "an outage shorter than the wait raises no critical error")
	require.NoError(t, b.manager.Err())
}

func TestStorageOutageLongerThanWaitRaisesOneCriticalError(t *testing.T) {
	t.Parallel()
	store := faultstore.Wrap(memory.New())
	rec := &criticalRecorder{}
	wait := 600 * time.Millisecond
	b := setup(t, store, func(c *timeouts.Config) {
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = wait
		c.RetryDelay = 50 * time.Millisecond
		// An idle poller notices an outage at its next look at the store; look often.
		c.PollInterval = 100 * time.Millisecond
		c.OnCriticalError = rec.action
	})

	failedAt := time.Now()
	store.Fail()
	require.Eventually(t, func() bool { return rec.count() >= 1 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(3 * wait) // the outage goes on
	require.Equal(t, 1, rec.count(), "exactly one critical error per outage")

	rec.mu.Lock()
	e, at := rec.errs[0], rec.at[0]
	rec.mu.Unlock()
	require.Equal(t, "fetch", e.Breaker)
	require.Equal(t, "Repeated failures when fetching timeouts from storage, endpoint will be terminated.", e.Message)
	require.ErrorIs(t, e, faultstore.ErrOutage)
	require.GreaterOrEqual(t, at.Sub(failedAt), wait, "not before the wait")
	require.Less(t, at.Sub(failedAt), wait+100*time.Millisecond+3*time.Second, "within poll interval + wait + a couple of seconds")

	var ce *timeouts.CriticalError
	require.True(t, errors.As(b.manager.Err(), &ce))
}

func TestDefaultCriticalErrorActionClosesTheRouter(t *testing.T) {
	t.Parallel()
	store := faultstore.Wrap(memory.New())
	b := setup(t, store, func(c *timeouts.Config) {
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = 300 * time.Millisecond
		c.RetryDelay = 50 * time.Millisecond
		c.PollInterval = 100 * time.Millisecond
	})
	store.Fail()
	require.Eventually(t, b.router.IsClosed, 10*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, b.manager.Err(), "Repeated failures when fetching timeouts from storage")
}
