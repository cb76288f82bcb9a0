package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
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

// The breaker's tests run in a synctest bubble: time is virtual, so a sleep advances it at once,
// and synctest.Wait lets every timer that is due fire before the test looks.

func TestBreakerOutageShorterThanWaitRaisesNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, rec := newBreaker(t, 300*time.Millisecond)
		ctx := context.Background()

		for range 10 { // 100 ms of failures
			b.Failure(ctx, errors.New("connection refused"))
		}
		require.True(t, b.Armed())
		b.Success()
		require.False(t, b.Armed())

		time.Sleep(500 * time.Millisecond) // advances virtual time well past the wait
		synctest.Wait()
		require.Empty(t, rec.all(), "a success before the wait must disarm the breaker")
	})
}

func TestBreakerOutageLongerThanWaitRaisesExactlyOne(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 200 * time.Millisecond
		b, rec := newBreaker(t, wait)
		ctx := context.Background()
		cause := errors.New("connection refused")

		start := time.Now()
		for time.Since(start) < 3*wait { // each Failure holds the caller back RetryDelay
			b.Failure(ctx, cause)
		}
		synctest.Wait()

		errs := rec.all()
		require.Len(t, errs, 1, "a breaker trips once per arming, however long the outage")
		e := errs[0]
		require.Equal(t, "fetch", e.Breaker)
		require.Equal(t, "Repeated failures when fetching timeouts from storage, endpoint will be terminated.", e.Message)
		require.ErrorIs(t, e, cause)
		require.Contains(t, e.Error(), critical.FetchMessage)
		require.Equal(t, start, e.FailingSince, "failing since the first failure")
		require.True(t, b.Tripped())
	})
}

func TestBreakerTripsOnTimeWithoutFurtherFailures(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 150 * time.Millisecond
		b, rec := newBreaker(t, wait)

		armed := time.Now()
		b.Failure(context.Background(), errors.New("down"))
		time.Sleep(time.Until(armed.Add(wait)) - time.Nanosecond) // advances virtual time to just before the wait
		synctest.Wait()
		require.Empty(t, rec.all(), "must not trip before the wait")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.Len(t, rec.all(), 1, "trips when the wait is over, with no failure to prompt it")
	})
}

func TestBreakerRearmsAfterSuccess(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 100 * time.Millisecond
		b, rec := newBreaker(t, wait)
		ctx := context.Background()

		b.Failure(ctx, errors.New("first outage"))
		time.Sleep(wait) // advances virtual time past the wait
		synctest.Wait()
		require.Len(t, rec.all(), 1)
		b.Success()
		require.False(t, b.Tripped())

		b.Failure(ctx, errors.New("second outage"))
		time.Sleep(wait)
		synctest.Wait()
		require.Len(t, rec.all(), 2)
		require.EqualError(t, rec.all()[1].Err, "second outage")
	})
}

func TestBreakerFailureHoldsCallerBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := &tripRecorder{}
		b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: "store", TimeToWait: time.Hour, Message: critical.StoreMessage,
			RetryDelay: 50 * time.Millisecond, OnTrip: rec.record,
		})
		require.NoError(t, err)
		defer b.Stop()

		start := time.Now()
		b.Failure(context.Background(), errors.New("x"))
		require.Equal(t, 50*time.Millisecond, time.Since(start), "held back RetryDelay")

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start = time.Now()
		b.Failure(ctx, errors.New("x"))
		require.Zero(t, time.Since(start), "a cancelled context releases the caller")
	})
}

func TestBreakerConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{Name: "x", Message: "m", OnTrip: func(*critical.Error) {}})
	require.ErrorIs(t, err, breaker.ErrInvalidConfig)
	require.ErrorContains(t, err, "TimeToWait must be positive")
}

func TestStoppedBreakerIsNeverArmedAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, rec := newBreaker(t, 50*time.Millisecond)
		b.Failure(context.Background(), errors.New("store down"))
		b.Stop()
		start := time.Now()
		b.Failure(context.Background(), errors.New("failed because the endpoint stopped"))
		require.Zero(t, time.Since(start), "a stopped breaker holds nobody back")
		require.False(t, b.Armed())
		time.Sleep(200 * time.Millisecond) // advances virtual time past the wait
		synctest.Wait()
		require.Empty(t, rec.all(), "a stopped breaker raises nothing")
	})
}

// Stop releases a caller that Failure holds back: a failing stage does not hold up a shutdown
// for its retry delay.
func TestStoppedBreakerReleasesTheCallerItHoldsBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := &tripRecorder{}
		b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: "dispatch", TimeToWait: time.Hour, Message: critical.DispatchMessage,
			RetryDelay: time.Hour, OnTrip: rec.record,
		})
		require.NoError(t, err)
		released := make(chan struct{})
		go func() {
			defer close(released)
			b.Failure(context.Background(), errors.New("broker down"))
		}()
		synctest.Wait()
		select {
		case <-released:
			t.Fatal("Failure did not hold its caller back")
		default:
		}
		start := time.Now()
		b.Stop()
		<-released
		require.Zero(t, time.Since(start), "released at the stop, not after the retry delay")
		b.Stop() // a second Stop is harmless
		require.Empty(t, rec.all())
	})
}

// The breaker reads the time from its Now, not the system clock: a failure's FailingSince and the
// Armed watch are on that clock.
func TestBreakerReadsItsClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ahead := func() time.Time { return time.Now().Add(time.Hour) }
		rec := &tripRecorder{}
		b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: "fetch", TimeToWait: time.Second, Message: critical.FetchMessage,
			RetryDelay: 10 * time.Millisecond, OnTrip: rec.record, Now: ahead,
		})
		require.NoError(t, err)
		defer b.Stop()

		failed := ahead()
		b.Failure(context.Background(), errors.New("down"))
		time.Sleep(time.Second) // advances virtual time to the wait
		synctest.Wait()
		require.Len(t, rec.all(), 1)
		require.Equal(t, failed, rec.all()[0].FailingSince, "failing since on the breaker's clock")
	})
}
