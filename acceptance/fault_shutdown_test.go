package acceptance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/wire"
)

// forwardInFlightCut is how many forwards a SIGTERM may leave without their remove. A forward
// once started, and the remove after it, run to their end during shutdown (the dispatch
// satellite detaches them from the message context the router cancels), so none.
const forwardInFlightCut = 0

// TestFaultSIGTERMDuringDispatch stops `timeoutmill run` with SIGTERM while it dispatches a
// backlog: it exits 0 within its close timeout, every message it forwarded has left the store
// (delivered + still stored = sent: no forward without its remove), and after a restart
// everything arrives, nothing twice.
func TestFaultSIGTERMDuringDispatch(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	const (
		count        = 3000
		closeTimeout = 10 * time.Second
	)
	e := newEnv(t, "sigterm")
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	dest := e.queue("due")
	client := newBrokerClient(t, e.url)
	args := runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--close-timeout", closeTimeout.String())
	first := startService(t, "sigterm-1", args...)
	got := client.consume(t, dest)
	errs := client.consume(t, e.errorQueue)

	// All due at one instant: a backlog the dispatcher works through one message at a time.
	msgs := newTimeouts(count, dest, time.Now().Add(3*time.Second), 0)
	_, err := client.send(context.Background(), wire.TimeoutsQueue(e.endpoint), msgs)
	require.NoError(t, err)
	require.True(t, got.waitDistinct(count/10, 3*time.Minute), "dispatching has begun")

	signalled := time.Now()
	first.signal(t, sigterm)
	code, exitedAt := first.wait(t, closeTimeout+time.Minute)
	stopTook := exitedAt.Sub(signalled)
	got.quiet(time.Second, 10*time.Second) // the last forwards reach the consumer
	delivered, stored, queued := got.distinct(), storedIDs(t, dsn, e.endpoint), client.queueDepth(wire.TimeoutsQueue(e.endpoint))
	// A timeout both delivered and still stored was forwarded without being removed: it will be
	// forwarded again.
	unfinished := 0
	for id := range stored {
		if got.firstArrival(id) != (time.Time{}) {
			unfinished++
		}
	}
	faultLog(t, "SIGTERM after %d of %d delivered: exit code %d after %s (close timeout %s); then %d delivered, %d stored, %d still to store: "+
		"%d forwarded without being removed",
		count/10, count, code, stopTook.Round(time.Millisecond), closeTimeout, delivered, len(stored), queued, unfinished)
	require.Equal(t, 0, code, "a clean stop:\n%s", first.tail(20))
	require.LessOrEqual(t, stopTook, closeTimeout+5*time.Second, "in-flight work finishes within the close timeout")
	require.GreaterOrEqual(t, delivered+len(stored)+queued, count, "nothing lost")
	require.LessOrEqual(t, unfinished, forwardInFlightCut, "forwards in flight finish with their remove")

	second := startService(t, "sigterm-2", args...)
	restarted := time.Now()
	require.True(t, got.waitDistinct(count, 4*time.Minute), "all delivered after the restart (%d of %d)", got.distinct(), count)
	allAt := time.Now()
	drain := waitDrained(t, client, dsn, e.endpoint, 2*time.Minute)
	got.quiet(2*time.Second, 10*time.Second)
	f := got.figures(ids(msgs))
	faultLog(t, "%s (error queue %d); all delivered %s after the restart, store drained %s later",
		f, errs.distinct(), allAt.Sub(restarted).Round(time.Millisecond), drain.Round(time.Millisecond))
	requireNoneLost(t, f)
	// The lease is 1 min: a claim cut by the stop, or announced after the transport closed, would
	// show here as a minute's wait (it did, before the service waited for its poller).
	require.Less(t, allAt.Sub(restarted), 30*time.Second, "a clean stop leaves no claimed id waiting for its lease")
	require.LessOrEqual(t, f.duplicated, forwardInFlightCut, "a clean stop duplicates nothing: %v", f.duplicatedIDs)
	require.Zero(t, errs.distinct(), "a clean stop sends nothing to the error queue")

	second.signal(t, sigterm)
	code, _ = second.wait(t, time.Minute)
	require.Equal(t, 0, code)
}
