package acceptance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/wire"
)

// inflightPerInstance bounds the duplicates one crashed `timeoutmill run` can cause: the command
// consumes each satellite queue with one consumer, which is handed its next message only after the
// previous one was acked, so at the moment of a kill -9 at most one message per satellite is in
// flight. A dispatcher message whose timeout was forwarded but not yet removed is forwarded again
// after the restart; a Timeouts message stored but not yet acked is stored again, and so delivered
// twice, if its first copy was dispatched in between. Nothing else is forwarded twice: claimed ids
// that were never announced are claimed again when their lease runs out, and announced ones are
// looked up before they are forwarded.
const inflightPerInstance = 2

// TestFaultKill9WhileStoringAndDispatching kills a `timeoutmill run` process with SIGKILL while
// 10,000 timeouts are being stored and dispatched, starts it again, and counts: none may be lost,
// and duplicates are bounded by what was in flight when it died.
func TestFaultKill9WhileStoringAndDispatching(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	count := 10000
	if !longFaultCases() {
		count = 3000 // outside CI; TIMEOUTMILL_FAULT_LONG=1 runs the full 10,000
	}
	e := newEnv(t, "crash")
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	dest := e.queue("due")
	client := newBrokerClient(t, e.url)
	args := runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--close-timeout", "10s")
	first := startService(t, "crash-1", args...)
	got := client.consume(t, dest)
	errs := client.consume(t, e.errorQueue)

	// Sent over about 8 s, due from 3 s on over 12 s: the service is still storing when it
	// starts dispatching, and is killed while it does both.
	msgs := newTimeouts(count, dest, time.Now().Add(3*time.Second), 12*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sent := client.sendPaced(ctx, wire.TimeoutsQueue(e.endpoint), msgs, count/10, 800*time.Millisecond)

	require.True(t, got.waitDistinct(count/10, 3*time.Minute), "a tenth delivered before the crash (%d so far)", got.distinct())
	atKill := struct{ delivered, stored, toStore, toDispatch int }{
		got.distinct(), storedTimeouts(dsn, e.endpoint),
		client.queueDepth(wire.TimeoutsQueue(e.endpoint)), client.queueDepth(wire.DispatcherQueue(e.endpoint)),
	}
	first.kill()
	killedAt := time.Now()
	require.NoError(t, <-sent)

	second := startService(t, "crash-2", args...)
	restarted := time.Now()
	deliveredBefore := got.distinct()
	require.True(t, got.waitDistinct(count, 4*time.Minute), "all delivered after the restart (%d of %d)", got.distinct(), count)
	allAt := time.Now()
	drain := waitDrained(t, client, dsn, e.endpoint, 2*time.Minute)
	got.quiet(2*time.Second, 10*time.Second)

	f := got.figures(ids(msgs))
	faultLog(t, "%s (error queue %d); at the kill: %d delivered, %d in the store, %d waiting to be stored, %d ids waiting for dispatch; "+
		"restart %s after the kill; all delivered %s after the restart; store drained %s later; duplicates allowed: %d",
		f, errs.distinct(), atKill.delivered, atKill.stored, atKill.toStore, atKill.toDispatch,
		restarted.Sub(killedAt).Round(time.Millisecond), allAt.Sub(restarted).Round(time.Millisecond), drain.Round(time.Millisecond),
		inflightPerInstance)
	requireNoneLost(t, f)
	require.Zero(t, errs.distinct(), "nothing went to the error queue")
	require.LessOrEqual(t, f.duplicated, inflightPerInstance, "duplicates beyond what was in flight: %v", f.duplicatedIDs)
	require.Greater(t, got.distinct(), deliveredBefore, "the restarted service delivered")

	second.signal(t, sigterm)
	code, _ := second.wait(t, time.Minute)
	require.Equal(t, 0, code, "a clean stop after the recovery")
}
