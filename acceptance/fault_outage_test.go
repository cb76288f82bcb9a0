package acceptance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The database outage cases stop a PostgreSQL of their own (scripts/services.sh on a private
// state directory and port), never the one the other tests share.

// criticalLogged is the line the command's default critical-error action logs, once per error.
const criticalLogged = "Critical error; closing the router"

// TestFaultDatabaseOutageShorterThanTheWait stops PostgreSQL for 10 s while timeouts are being
// stored and dispatched, with a 30 s outage wait: no critical error, nothing lost, everything
// delivered once the database is back.
func TestFaultDatabaseOutageShorterThanTheWait(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	const (
		count  = 3000
		outage = 10 * time.Second
	)
	srv := newPrivateServers(t)
	srv.up(t, "postgres")
	dsn := srv.postgresDSN()
	e := newEnv(t, "pgshort")
	dest := e.queue("due")
	client := newBrokerClient(t, e.url)
	svc := startService(t, "pgshort", runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--outage-wait", "30s", "--close-timeout", "10s")...)
	got := client.consume(t, dest)
	errs := client.consume(t, e.errorQueue)

	// A steady load over 20 s, each timeout due 2 s after it is sent: the outage interrupts
	// storing, polling and dispatching alike.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var msgs []timeoutMsg
	sent := make(chan error, 1)
	start := time.Now()
	go func() {
		for i := range 20 {
			batch := newTimeouts(count/20, dest, start.Add(time.Duration(i)*time.Second+2*time.Second), time.Second)
			msgs = append(msgs, batch...)
			if _, err := client.send(ctx, wire.TimeoutsQueue(e.endpoint), batch); err != nil {
				sent <- err
				return
			}
			time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second)))
		}
		sent <- nil
	}()

	time.Sleep(5 * time.Second)
	deliveredBefore := got.distinct()
	stopping := time.Now()
	srv.down(t, "postgres")
	time.Sleep(outage - time.Since(stopping))
	srv.up(t, "postgres")
	back := time.Now()
	deliveredDuring := got.distinct() - deliveredBefore
	require.NoError(t, <-sent)
	require.True(t, svc.running(), "the service survives an outage shorter than its wait:\n%s", svc.tail(20))

	require.True(t, got.waitDistinct(count, 3*time.Minute), "all delivered after the outage (%d of %d)", got.distinct(), count)
	allAt := time.Now()
	drain := waitDrained(t, client, dsn, e.endpoint, 2*time.Minute)
	got.quiet(2*time.Second, 10*time.Second)

	f := got.figures(ids(msgs))
	worst, late := got.lateness(msgs, outage+5*time.Second)
	faultLog(t, "%s (error queue %d); database down %s (%d delivered meanwhile from what was already announced); "+
		"latest delivery %s after due (%d more than the outage + 5 s late); "+
		"all delivered %s after it returned, store drained %s later; critical errors: %d; failures logged: %d",
		f, errs.distinct(), back.Sub(stopping).Round(time.Millisecond), deliveredDuring, worst.Round(time.Millisecond), late,
		allAt.Sub(back).Round(time.Millisecond), drain.Round(time.Millisecond),
		svc.count(criticalLogged), svc.count("level=ERROR"))
	requireNoneLost(t, f)
	require.Zero(t, errs.distinct(), "an outage sends nothing to the error queue")
	require.Zero(t, svc.count(criticalLogged), "no critical error for an outage shorter than the wait")
	require.True(t, svc.running())

	svc.signal(t, sigterm)
	code, _ := svc.wait(t, time.Minute)
	require.Equal(t, 0, code)
}

// TestFaultDatabaseOutageLongerThanTheWait stops PostgreSQL for good under load with a 5 s
// outage wait: exactly one critical error, with the documented message, within the wait plus
// 3 s, and the process exits non-zero. When the database is back and the service restarted,
// every timeout is delivered.
func TestFaultDatabaseOutageLongerThanTheWait(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	const (
		count = 2000
		wait  = 5 * time.Second
	)
	srv := newPrivateServers(t)
	srv.up(t, "postgres")
	dsn := srv.postgresDSN()
	e := newEnv(t, "pglong")
	dest := e.queue("due")
	client := newBrokerClient(t, e.url)
	args := runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--outage-wait", wait.String(), "--close-timeout", "5s")
	svc := startService(t, "pglong-1", args...)
	got := client.consume(t, dest)
	errs := client.consume(t, e.errorQueue)

	// Due from 2 s on over 20 s: the poller is busy when the database goes.
	msgs := newTimeouts(count, dest, time.Now().Add(2*time.Second), 20*time.Second)
	_, err := client.send(context.Background(), wire.TimeoutsQueue(e.endpoint), msgs)
	require.NoError(t, err)
	require.True(t, got.waitDistinct(count/5, 2*time.Minute), "a fifth delivered before the outage")

	stopping := time.Now()
	srv.down(t, "postgres")
	stopped := time.Now()
	line, ok := svc.waitLog(criticalLogged, wait+time.Minute)
	require.True(t, ok, "a critical error is raised:\n%s", svc.tail(30))
	detect := line.at.Sub(stopping)
	code, exitedAt := svc.wait(t, time.Minute)
	deliveredBefore := got.distinct()

	faultLog(t, "outage wait %s: database stopped (took %s), critical error %s after the stop began, process exited %s after it with code %d; "+
		"%d of %d delivered before the exit",
		wait, stopped.Sub(stopping).Round(time.Millisecond), detect.Round(time.Millisecond),
		exitedAt.Sub(line.at).Round(time.Millisecond), code, deliveredBefore, count)
	// Every stage that calls the store fails with it: the poller's (fetch) and, with due
	// timeouts being delivered, the dispatch satellite's, whose wait --outage-wait sets too. The
	// first to reach its wait stops the endpoint; the other may raise its own a moment later.
	require.LessOrEqual(t, svc.count(criticalLogged), 2, "one critical error per failing stage at most:\n%s", svc.tail(30))
	fromStore := func(text string) bool {
		return strings.Contains(text, critical.FetchMessage) && strings.Contains(text, "fetch breaker") ||
			strings.Contains(text, critical.DispatchMessage) && strings.Contains(text, "dispatch breaker") && strings.Contains(text, "postgres")
	}
	require.True(t, fromStore(line.text), "the critical error of a stage that calls the store, with its text: %s", line.text)
	require.LessOrEqual(t, detect, wait+3*time.Second, "raised within the wait plus 3 s")
	require.GreaterOrEqual(t, detect, wait-time.Second, "not before the wait")
	require.NotEqual(t, 0, code, "the process exits non-zero")
	last, ok := svc.waitLog("timeoutmill: critical error", time.Second)
	require.True(t, ok, "the exit says why:\n%s", svc.tail(10))
	require.True(t, strings.Contains(last.text, critical.FetchMessage) || strings.Contains(last.text, critical.DispatchMessage), last.text)

	// The database returns; so does the service.
	srv.up(t, "postgres")
	restarted := time.Now()
	second := startService(t, "pglong-2", args...)
	require.True(t, got.waitDistinct(count, 3*time.Minute), "all delivered after the restart (%d of %d)", got.distinct(), count)
	allAt := time.Now()
	drain := waitDrained(t, client, dsn, e.endpoint, 2*time.Minute)
	got.quiet(2*time.Second, 10*time.Second)

	f := got.figures(ids(msgs))
	faultLog(t, "%s (error queue %d); all delivered %s after the database and the service were back, store drained %s later",
		f, errs.distinct(), allAt.Sub(restarted).Round(time.Millisecond), drain.Round(time.Millisecond))
	requireNoneLost(t, f)
	require.Zero(t, errs.distinct())
	require.Zero(t, second.count(criticalLogged))
	second.signal(t, sigterm)
	code, _ = second.wait(t, time.Minute)
	require.Equal(t, 0, code)
}
