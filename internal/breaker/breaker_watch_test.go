package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
)

// A call that never returns (a black-holed network) reports no failure; the breaker trips all the
// same, TimeToWait after the call began, with the stage's message and ErrNoAnswer.
func TestBreakerTripsOnACallThatNeverReturns(t *testing.T) {
	t.Parallel()
	wait := 200 * time.Millisecond
	b, rec := newBreaker(t, wait)

	began := time.Now()
	_, end := b.Call(context.Background()) // never ended before the trip: it hangs
	defer end(nil)
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, 5*time.Second, time.Millisecond)
	tripped := time.Now()

	e := rec.all()[0]
	require.GreaterOrEqual(t, tripped.Sub(began), wait, "not before the wait")
	require.Equal(t, critical.FetchMessage, e.Message)
	require.ErrorIs(t, e, critical.ErrNoAnswer)
	require.WithinDuration(t, began, e.FailingSince, 50*time.Millisecond, "failing since the call began")
	require.True(t, b.Tripped())

	time.Sleep(2 * wait)
	require.Len(t, rec.all(), 1, "once, however long the call hangs")
}

// The time counted is the time since the stage's last success while calls are in flight: other
// calls that succeed keep a slow one from tripping the breaker.
func TestBreakerSuccessesWhileACallHangsPostponeTheTrip(t *testing.T) {
	t.Parallel()
	wait := 300 * time.Millisecond
	b, rec := newBreaker(t, wait)

	_, end := b.Call(context.Background())
	defer end(nil)
	for range 10 { // a success every half wait, for five waits
		time.Sleep(wait / 2)
		b.Success()
	}
	require.Empty(t, rec.all(), "successes every half wait: the stage is working")

	stopped := time.Now()
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, 5*time.Second, time.Millisecond)
	require.GreaterOrEqual(t, time.Since(stopped), wait, "the wait counts from the last success")
}

// Calls that end, however many and for however long in all, trip nothing while the stage succeeds;
// and with no call in flight there is nothing to watch.
func TestBreakerCallsThatEndTripNothing(t *testing.T) {
	t.Parallel()
	wait := 150 * time.Millisecond
	b, rec := newBreaker(t, wait)

	deadline := time.Now().Add(4 * wait)
	for time.Now().Before(deadline) {
		_, end := b.Call(context.Background())
		time.Sleep(10 * time.Millisecond)
		b.Success()
		end(nil)
	}
	// A call that ended with a failure arms the breaker as Failure always did; none in flight now.
	_, end := b.Call(context.Background())
	end(nil)
	time.Sleep(3 * wait)
	require.Empty(t, rec.all())
	require.False(t, b.Armed())
}

// A call's context carries CallTimeout: the call ends with a deadline error its caller reports.
func TestBreakerCallHasADeadline(t *testing.T) {
	t.Parallel()
	rec := &tripRecorder{}
	b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "store", TimeToWait: time.Hour, Message: critical.StoreMessage, CallTimeout: 50 * time.Millisecond,
		OnTrip: rec.record,
	})
	require.NoError(t, err)
	defer b.Stop()

	ctx, end := b.Call(context.Background())
	defer end(nil)
	dl, ok := ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(50*time.Millisecond), dl, 40*time.Millisecond)
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)

	// The default: 10 s, or the wait when shorter.
	short, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "fetch", TimeToWait: 2 * time.Second, Message: critical.FetchMessage, OnTrip: rec.record,
	})
	require.NoError(t, err)
	defer short.Stop()
	ctx, end = short.Call(context.Background())
	defer end(nil)
	dl, _ = ctx.Deadline()
	require.WithinDuration(t, time.Now().Add(2*time.Second), dl, time.Second)

	long, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "fetch", TimeToWait: time.Hour, Message: critical.FetchMessage, OnTrip: rec.record,
	})
	require.NoError(t, err)
	defer long.Stop()
	ctx, end = long.Call(context.Background())
	defer end(nil)
	dl, _ = ctx.Deadline()
	require.WithinDuration(t, time.Now().Add(breaker.DefaultCallTimeout), dl, time.Second)

	_, err = breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "x", TimeToWait: time.Second, Message: "m", CallTimeout: -time.Second, OnTrip: rec.record,
	})
	require.ErrorIs(t, err, breaker.ErrInvalidConfig)
	require.ErrorContains(t, err, "CallTimeout must not be negative")
}

// A trip on a hanging call carries the last failure seen, so the operator sees what failed
// before the calls stopped answering; and it comes the wait after the call began, before the
// failure's own timer would have fired.
func TestBreakerTripOnAHangCarriesTheLastFailure(t *testing.T) {
	t.Parallel()
	wait := 300 * time.Millisecond
	b, rec := newBreaker(t, wait)

	cause := errors.New("connection reset by peer")
	began := time.Now()
	_, end := b.Call(context.Background())
	defer end(nil)
	time.Sleep(2 * wait / 3)
	b.Failure(context.Background(), cause) // its own timer would fire at 5/3 of the wait
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, 5*time.Second, time.Millisecond)
	require.Less(t, time.Since(began), 3*wait/2, "the watch, not the failure's timer, tripped it")
	require.ErrorIs(t, rec.all()[0], cause)
	require.ErrorIs(t, rec.all()[0], critical.ErrNoAnswer)
}

// Stop ends the watch: a call still hanging at the stop trips nothing.
func TestStoppedBreakerWatchesNoCall(t *testing.T) {
	t.Parallel()
	wait := 100 * time.Millisecond
	b, rec := newBreaker(t, wait)

	_, end := b.Call(context.Background())
	defer end(nil)
	b.Stop()
	_, end2 := b.Call(context.Background())
	defer end2(nil)
	time.Sleep(3 * wait)
	require.Empty(t, rec.all())
}

// Armed says so while calls go unanswered, as it does while failures are counted.
func TestBreakerIsArmedWhileCallsGoUnanswered(t *testing.T) {
	t.Parallel()
	b, _ := newBreaker(t, time.Hour)
	_, end := b.Call(context.Background())
	require.False(t, b.Armed(), "a call just begun is not an outage")
	require.Eventually(t, b.Armed, 5*time.Second, 10*time.Millisecond, "a call unanswered for a second is")
	b.Success()
	require.False(t, b.Armed(), "a success disarms")
	end(nil)
	require.False(t, b.Armed())
}

// A call that gives up after a while (its deadline, a dead connection found by a heartbeat)
// reports a failure late; the breaker counts from when that call began, so the critical error is
// not put off by the while.
func TestBreakerFailureAfterAnUnansweredCallCountsFromTheCall(t *testing.T) {
	t.Parallel()
	wait := 400 * time.Millisecond
	b, rec := newBreaker(t, wait)

	began := time.Now()
	_, end := b.Call(context.Background())
	time.Sleep(wait / 2) // the call hangs, then gives up
	cause := errors.New("connection closed: no heartbeat")
	end(cause)
	b.Failure(context.Background(), cause)
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, 5*time.Second, time.Millisecond)
	require.Less(t, time.Since(began), wait+wait/2, "tripped the wait after the call began, not the wait after it gave up")
	require.GreaterOrEqual(t, time.Since(began), wait)
	require.WithinDuration(t, began, rec.all()[0].FailingSince, 50*time.Millisecond)

	// An answered call in between starts the count afresh.
	b2, rec2 := newBreaker(t, wait)
	_, end = b2.Call(context.Background())
	end(errors.New("refused"))
	_, end = b2.Call(context.Background())
	end(nil)
	time.Sleep(wait / 2)
	failed := time.Now()
	b2.Failure(context.Background(), cause)
	require.Eventually(t, func() bool { return len(rec2.all()) == 1 }, 5*time.Second, time.Millisecond)
	require.GreaterOrEqual(t, time.Since(failed), wait, "counted from the failure: the earlier unanswered call was followed by an answer")
}
