package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
)

type tripRecorder struct {
	mu   sync.Mutex
	errs []*critical.Error
}

func (r *tripRecorder) record(e *critical.Error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, e)
}

func (r *tripRecorder) all() []*critical.Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*critical.Error(nil), r.errs...)
}

func newBreaker(t *testing.T, wait time.Duration) (*breaker.CircuitBreaker, *tripRecorder) {
	t.Helper()
	rec := &tripRecorder{}
	b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name:       "fetch",
		TimeToWait: wait,
		Message:    critical.FetchMessage,
		RetryDelay: 10 * time.Millisecond,
		OnTrip:     rec.record,
	})
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	return b, rec
}

func TestBreakerOutageShorterThanWaitRaisesNothing(t *testing.T) {
	t.Parallel()
	b, rec := newBreaker(t, 300*time.Millisecond)
	ctx := context.Background()

	for range 10 { // ~100 ms of failures
		b.Failure(ctx, errors.New("connection refused"))
	}
	require.True(t, b.Armed())
	b.Success()
	require.False(t, b.Armed())

	time.Sleep(500 * time.Millisecond) // well past the wait
	require.Empty(t, rec.all(), "a success before the wait must disarm the breaker")
}

func TestBreakerOutageLongerThanWaitRaisesExactlyOne(t *testing.T) {
	t.Parallel()
	wait := 200 * time.Millisecond
	b, rec := newBreaker(t, wait)
	ctx := context.Background()
	cause := errors.New("connection refused")

	start := time.Now()
	for time.Since(start) < 3*wait {
		b.Failure(ctx, cause)
	}

	errs := rec.all()
	require.Len(t, errs, 1, "a breaker trips once per arming, however long the outage")
	e := errs[0]
	require.Equal(t, "fetch", e.Breaker)
	require.Equal(t, "Repeated failures when fetching timeouts from storage, endpoint will be terminated.", e.Message)
	require.ErrorIs(t, e, cause)
	require.Contains(t, e.Error(), critical.FetchMessage)
	require.True(t, b.Tripped())
}

func TestBreakerTripsOnTimeWithoutFurtherFailures(t *testing.T) {
	t.Parallel()
	wait := 150 * time.Millisecond
	b, rec := newBreaker(t, wait)

	armed := time.Now()
	b.Failure(context.Background(), errors.New("down"))
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(armed), wait, "must not trip before the wait")
}

func TestBreakerRearmsAfterSuccess(t *testing.T) {
	t.Parallel()
	b, rec := newBreaker(t, 100*time.Millisecond)
	ctx := context.Background()

	b.Failure(ctx, errors.New("first outage"))
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, 5*time.Second, 5*time.Millisecond)
	b.Success()
	require.False(t, b.Tripped())

	b.Failure(ctx, errors.New("second outage"))
	require.Eventually(t, func() bool { return len(rec.all()) == 2 }, 5*time.Second, 5*time.Millisecond)
	require.EqualError(t, rec.all()[1].Err, "second outage")
}

func TestBreakerFailureHoldsCallerBack(t *testing.T) {
	t.Parallel()
	rec := &tripRecorder{}
	b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "store", TimeToWait: time.Hour, Message: critical.StoreMessage,
		RetryDelay: 50 * time.Millisecond, OnTrip: rec.record,
	})
	require.NoError(t, err)
	defer b.Stop()

	start := time.Now()
	b.Failure(context.Background(), errors.New("x"))
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	b.Failure(ctx, errors.New("x"))
	require.Less(t, time.Since(start), 40*time.Millisecond, "a cancelled context releases the caller")
}

func TestBreakerConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{Name: "x", Message: "m", OnTrip: func(*critical.Error) {}})
	require.ErrorIs(t, err, breaker.ErrInvalidConfig)
	require.ErrorContains(t, err, "TimeToWait must be positive")
}

func TestStoppedBreakerIsNeverArmedAgain(t *testing.T) {
	t.Parallel()
	b, rec := newBreaker(t, 50*time.Millisecond)
	b.Failure(context.Background(), errors.New("store down"))
	b.Stop()
	start := time.Now()
	b.Failure(context.Background(), errors.New("failed because the endpoint stopped"))
	require.Less(t, time.Since(start), 10*time.Millisecond, "a stopped breaker holds nobody back")
	require.False(t, b.Armed())
	time.Sleep(200 * time.Millisecond)
	require.Empty(t, rec.all(), "a stopped breaker raises nothing")
}
