package breaker_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
)

func newRateBreaker(t *testing.T, perSecond int, window time.Duration) (*breaker.RateBreaker, *tripRecorder) {
	t.Helper()
	rec := &tripRecorder{}
	b, err := breaker.NewRateBreaker(breaker.RateBreakerConfig{
		Name: "recovery", MaxFailuresPerSecond: perSecond, Window: window,
		Message: critical.RecoveryMessage, OnTrip: rec.record,
	})
	require.NoError(t, err)
	return b, rec
}

func TestRateBreakerTripsOnceWhenFailuresOutpaceTheRate(t *testing.T) {
	t.Parallel()
	b, rec := newRateBreaker(t, 1, 30*time.Second) // more than 30 in 30 s
	cause := errors.New("store unreachable")
	for range 30 {
		b.Failure(cause)
	}
	require.Empty(t, rec.all(), "30 failures in 30 s is the rate, not above it")
	b.Failure(cause)
	for range 100 {
		b.Failure(cause)
	}
	errs := rec.all()
	require.Len(t, errs, 1, "once per window")
	require.Equal(t, "recovery", errs[0].Breaker)
	require.Equal(t, "Failed to execute error handling for delayed message forwarding", errs[0].Message)
	require.ErrorIs(t, errs[0], cause)
}

func TestRateBreakerCountsAgainInANewWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, rec := newRateBreaker(t, 2, time.Second) // more than 2 in 1 s
		for range 2 {
			b.Failure(errors.New("x"))
		}
		time.Sleep(time.Second) // advances virtual time: the window ends; its count with it
		for range 2 {
			b.Failure(errors.New("x"))
		}
		require.Empty(t, rec.all())
		b.Failure(errors.New("x"))
		require.Len(t, rec.all(), 1)
		time.Sleep(time.Second)
		for range 3 {
			b.Failure(errors.New("again"))
		}
		require.Len(t, rec.all(), 2, "a later burst trips again")
	})
}

// The window opens on the breaker's clock (Now): FailingSince is that clock's time.
func TestRateBreakerReadsItsClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ahead := func() time.Time { return time.Now().Add(time.Hour) }
		rec := &tripRecorder{}
		b, err := breaker.NewRateBreaker(breaker.RateBreakerConfig{
			Name: "recovery", MaxFailuresPerSecond: 1, Window: time.Second,
			Message: critical.RecoveryMessage, OnTrip: rec.record, Now: ahead,
		})
		require.NoError(t, err)
		opened := ahead()
		b.Failure(errors.New("x"))
		b.Failure(errors.New("x"))
		require.Len(t, rec.all(), 1)
		require.Equal(t, opened, rec.all()[0].FailingSince)
	})
}

func TestRateBreakerConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := breaker.NewRateBreaker(breaker.RateBreakerConfig{Name: "recovery", Message: "m", OnTrip: func(*critical.Error) {}})
	require.ErrorIs(t, err, breaker.ErrInvalidConfig)
	require.ErrorContains(t, err, "MaxFailuresPerSecond must be positive, got 0")
}
