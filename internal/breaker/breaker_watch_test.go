package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
)

// A call that never returns (a black-holed network) reports no failure; the breaker trips all the
// same, TimeToWait after the call began, with the stage's message and ErrNoAnswer.
func TestBreakerTripsOnACallThatNeverReturns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 200 * time.Millisecond
		b, rec := newBreaker(t, wait)

		began := time.Now()
		_, end := b.Call(context.Background()) // never ended before the trip: it hangs
		defer end(nil)
		time.Sleep(wait - time.Nanosecond) // advances virtual time to just before the wait
		synctest.Wait()
		require.Empty(t, rec.all(), "not before the wait")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.Len(t, rec.all(), 1, "the wait after the call began")

		e := rec.all()[0]
		require.Equal(t, critical.FetchMessage, e.Message)
		require.ErrorIs(t, e, critical.ErrNoAnswer)
		require.Equal(t, began, e.FailingSince, "failing since the call began")
		require.True(t, b.Tripped())

		time.Sleep(2 * wait) // advances virtual time while the call still hangs
		synctest.Wait()
		require.Len(t, rec.all(), 1, "once, however long the call hangs")
	})
}

// The time counted is the time since the stage's last success while calls are in flight: other
// calls that succeed keep a slow one from tripping the breaker.
func TestBreakerSuccessesWhileACallHangsPostponeTheTrip(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 300 * time.Millisecond
		b, rec := newBreaker(t, wait)

		_, end := b.Call(context.Background())
		defer end(nil)
		for range 10 { // a success every half wait, for five waits
			time.Sleep(wait / 2) // advances virtual time
			b.Success()
		}
		synctest.Wait()
		require.Empty(t, rec.all(), "successes every half wait: the stage is working")

		time.Sleep(wait - time.Nanosecond)
		synctest.Wait()
		require.Empty(t, rec.all(), "not before the wait after the last success")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.Len(t, rec.all(), 1, "the wait counts from the last success")
	})
}

// Calls that end, however many and for however long in all, trip nothing while the stage succeeds;
// and with no call in flight there is nothing to watch.
func TestBreakerCallsThatEndTripNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 150 * time.Millisecond
		b, rec := newBreaker(t, wait)

		deadline := time.Now().Add(4 * wait)
		for time.Now().Before(deadline) {
			_, end := b.Call(context.Background())
			time.Sleep(10 * time.Millisecond) // advances virtual time: the call takes 10 ms
			b.Success()
			end(nil)
		}
		_, end := b.Call(context.Background())
		end(nil)
		time.Sleep(3 * wait) // advances virtual time with no call in flight
		synctest.Wait()
		require.Empty(t, rec.all())
		require.False(t, b.Armed())
	})
}

// A call's context carries CallTimeout: the call ends with a deadline error its caller reports.
func TestBreakerCallHasADeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := &tripRecorder{}
		b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: "store", TimeToWait: time.Hour, Message: critical.StoreMessage, CallTimeout: 50 * time.Millisecond,
			OnTrip: rec.record,
		})
		require.NoError(t, err)
		defer b.Stop()

		began := time.Now()
		ctx, end := b.Call(context.Background())
		defer end(nil)
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		require.Equal(t, began.Add(50*time.Millisecond), dl)
		<-ctx.Done()
		require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		require.Equal(t, 50*time.Millisecond, time.Since(began))

		// The default: 10 s, or the wait when shorter.
		short, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: "fetch", TimeToWait: 2 * time.Second, Message: critical.FetchMessage, OnTrip: rec.record,
		})
		require.NoError(t, err)
		defer short.Stop()
		ctx, end = short.Call(context.Background())
		defer end(nil)
		dl, _ = ctx.Deadline()
		require.Equal(t, time.Now().Add(2*time.Second), dl)

		long, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: "fetch", TimeToWait: time.Hour, Message: critical.FetchMessage, OnTrip: rec.record,
		})
		require.NoError(t, err)
		defer long.Stop()
		ctx, end = long.Call(context.Background())
		defer end(nil)
		dl, _ = ctx.Deadline()
		require.Equal(t, time.Now().Add(breaker.DefaultCallTimeout), dl)

		_, err = breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: "x", TimeToWait: time.Second, Message: "m", CallTimeout: -time.Second, OnTrip: rec.record,
		})
		require.ErrorIs(t, err, breaker.ErrInvalidConfig)
		require.ErrorContains(t, err, "CallTimeout must not be negative")
	})
}

// A trip on a hanging call carries the last failure seen, so the operator sees what failed
// before the calls stopped answering; and it comes the wait after the call began, before the
// failure's own timer would have fired.
func TestBreakerTripOnAHangCarriesTheLastFailure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 300 * time.Millisecond
		b, rec := newBreaker(t, wait)

		cause := errors.New("connection reset by peer")
		began := time.Now()
		_, end := b.Call(context.Background())
		defer end(nil)
		time.Sleep(2 * wait / 3)               // advances virtual time
		b.Failure(context.Background(), cause) // its own timer would fire at 5/3 of the wait
		time.Sleep(time.Until(began.Add(wait)))
		synctest.Wait()
		require.Len(t, rec.all(), 1, "the watch, not the failure's timer, tripped it, the wait after the call began")
		require.ErrorIs(t, rec.all()[0], cause)
		require.ErrorIs(t, rec.all()[0], critical.ErrNoAnswer)
	})
}

// Stop ends the watch: a call still hanging at the stop trips nothing.
func TestStoppedBreakerWatchesNoCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 100 * time.Millisecond
		b, rec := newBreaker(t, wait)

		_, end := b.Call(context.Background())
		defer end(nil)
		b.Stop()
		_, end2 := b.Call(context.Background())
		defer end2(nil)
		time.Sleep(3 * wait) // advances virtual time past the wait
		synctest.Wait()
		require.Empty(t, rec.all())
	})
}

// Armed says so while calls go unanswered, as it does while failures are counted.
func TestBreakerIsArmedWhileCallsGoUnanswered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, _ := newBreaker(t, time.Hour)
		_, end := b.Call(context.Background())
		require.False(t, b.Armed(), "a call just begun is not an outage")
		time.Sleep(time.Second) // advances virtual time
		require.False(t, b.Armed(), "a call unanswered for a second is not yet")
		time.Sleep(time.Nanosecond)
		require.True(t, b.Armed(), "a call unanswered for over a second is")
		b.Success()
		require.False(t, b.Armed(), "a success disarms")
		end(nil)
		require.False(t, b.Armed())
	})
}

// A call that gives up after a while (its deadline, a dead connection found by a heartbeat)
// reports a failure late; the breaker counts from when that call began, so the critical error is
// not put off by the while.
func TestBreakerFailureAfterAnUnansweredCallCountsFromTheCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		wait := 400 * time.Millisecond
		b, rec := newBreaker(t, wait)

		began := time.Now()
		_, end := b.Call(context.Background())
		time.Sleep(wait / 2) // advances virtual time: the call hangs, then gives up
		cause := errors.New("connection closed: no heartbeat")
		end(cause)
		b.Failure(context.Background(), cause)
		time.Sleep(time.Until(began.Add(wait)) - time.Nanosecond)
		synctest.Wait()
		require.Empty(t, rec.all(), "not before the wait")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.Len(t, rec.all(), 1, "tripped the wait after the call began, not the wait after it gave up")
		require.Equal(t, began, rec.all()[0].FailingSince)

		// An answered call in between starts the count afresh.
		b2, rec2 := newBreaker(t, wait)
		_, end = b2.Call(context.Background())
		end(errors.New("refused"))
		_, end = b2.Call(context.Background())
		end(nil)
		time.Sleep(wait / 2)
		failed := time.Now()
		b2.Failure(context.Background(), cause)
		time.Sleep(time.Until(failed.Add(wait)) - time.Nanosecond)
		synctest.Wait()
		require.Empty(t, rec2.all(), "counted from the failure: the earlier unanswered call was followed by an answer")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.Len(t, rec2.all(), 1)
	})
}
