package acceptance

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// inflightPerInstance bounds the duplicates one crashed `timeoutmill run` can cause. Its dispatch
// satellite forwards due ids in batches, several side by side, and removes each batch's ids
// together once all of them are out: the ids of the batches running at the moment of a kill -9
// are forwarded again after the restart (satellites.MaxUnremoved). The store satellite adds at
// most the messages it had handed out (connect.ServiceConsumers): one stored but not yet acked is
// stored again after the restart, and forwarded again if the killed process had forwarded and
// removed it meanwhile. Nothing else is forwarded twice: claimed ids that were never announced are
// claimed again when their lease runs out, or at the restart's start when it has the killed
// run's --instance; announced ones are looked up before they are forwarded, and one process never
// forwards an id announced twice (its earlier announcement still queued) in two batches at once.
// So every duplicate's first copy came from the killed process.
func inflightPerInstance() int {
	return satellites.MaxUnremoved(0) + connect.ServiceConsumers
}

// restartBound is how long after a restart under the killed run's --instance every timeout due by
// then should take to arrive (counted from the later of its due time and the restart): the drill
// prints how many took longer. What it asserts is recoveryBound, generous for a loaded machine
// yet far below the drill's claim lease (recoveryLease), so that only the restart's giving back
// its claims can meet it.
const (
	restartBound  = 5 * time.Second
	recoveryBound = 30 * time.Second
	recoveryLease = "5m"
)

// crashDrill is what a kill -9 drill saw: the timeouts sent, what arrived, and when the second
// process was launched.
type crashDrill struct {
	msgs      []timeoutMsg
	got       *tally
	f         figures
	restarted time.Time // the second process's launch
	allAt     time.Time // every timeout had arrived
	second    *service
}

// waits is how long each timeout not delivered before the restart took after the later of its due
// time and the restart: the worst of those due by the restart (and how many took longer than
// bound), and the worst of those due after it.
func (d crashDrill) waits(bound time.Duration) (worstDue time.Duration, beyond, dueByRestart int, worstLater time.Duration) {
	for _, m := range d.msgs {
		at := d.got.firstArrival(m.id)
		if at.IsZero() || at.Before(d.restarted) {
			continue // lost (counted elsewhere), or delivered before the restart
		}
		if m.due.After(d.restarted) {
			worstLater = max(worstLater, at.Sub(m.due))
			continue
		}
		dueByRestart++
		wait := at.Sub(d.restarted)
		worstDue = max(worstDue, wait)
		if wait > bound {
			beyond++
		}
	}
	return worstDue, beyond, dueByRestart, worstLater
}

// killAndRestart runs `timeoutmill run` (with extra flags for each process), kills it with SIGKILL
// while 10,000 timeouts (3,000 outside CI) are being stored and dispatched, starts a second
// process, waits for every timeout, and checks that none was lost, nothing went to the error
// queue and duplicates stay within what was in flight. It logs the figures.
func killAndRestart(t *testing.T, tag string, firstFlags, secondFlags []string, recovery string) crashDrill {
	t.Helper()
	count := 10000
	if !longFaultCases() {
		count = 3000 // outside CI; TIMEOUTMILL_FAULT_LONG=1 runs the full 10,000
	}
	e := newEnv(t, tag)
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	dest := e.queue("due")
	client := newBrokerClient(t, e.url)
	args := runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--close-timeout", "10s")
	first := startService(t, tag+"-1", append(args, firstFlags...)...)
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

	d := crashDrill{msgs: msgs, got: got}
	d.second = runCommand(t, tag+"-2", append(args, secondFlags...)...)
	d.restarted = d.second.started
	if _, ok := d.second.waitLog(`msg=Running`, 90*time.Second); !ok {
		t.Fatalf("the second process did not start within 90 s; its output:\n%s", d.second.output())
	}
	deliveredBefore := got.distinct()
	require.True(t, got.waitDistinct(count, 4*time.Minute), "all delivered after the restart (%d of %d)", got.distinct(), count)
	d.allAt = time.Now()
	drain := waitDrained(t, client, dsn, e.endpoint, 2*time.Minute)
	got.quiet(2*time.Second, 10*time.Second)

	d.f = got.figures(ids(msgs))
	worstDue, beyond, dueByRestart, worstLater := d.waits(restartBound)
	var dupFrom, dupTo time.Duration // when the duplicates' first copies arrived, relative to the kill
	for i, id := range d.f.duplicatedIDs {
		at := got.firstArrival(id).Sub(killedAt)
		if i == 0 || at < dupFrom {
			dupFrom = at
		}
		if i == 0 || at > dupTo {
			dupTo = at
		}
	}
	faultLog(t, "%s (error queue %d); at the kill: %d delivered, %d stored (the rest still being sent and stored), %d waiting in the Timeouts queue, %d ids waiting for dispatch; "+
		"restart %s after the kill; all delivered %s after the restart (%s); %d due by the restart and not yet delivered: the worst arrived %s after the restart, %d beyond %s; "+
		"the worst of those due later arrived %s after its due time; store drained %s later; "+
		"the duplicates' first copies arrived from %s to %s after the kill; duplicates allowed: %d",
		d.f, errs.distinct(), atKill.delivered, atKill.stored, atKill.toStore, atKill.toDispatch,
		d.restarted.Sub(killedAt).Round(time.Millisecond), d.allAt.Sub(d.restarted).Round(time.Millisecond), recovery,
		dueByRestart, worstDue.Round(time.Millisecond), beyond, restartBound, worstLater.Round(time.Millisecond),
		drain.Round(time.Millisecond), dupFrom.Round(time.Millisecond), dupTo.Round(time.Millisecond), inflightPerInstance())
	requireNoneLost(t, d.f)
	require.Zero(t, errs.distinct(), "nothing went to the error queue")
	require.LessOrEqual(t, d.f.duplicated, inflightPerInstance(), "duplicates beyond what was in flight: %v", d.f.duplicatedIDs)
	for _, id := range d.f.duplicatedIDs {
		require.True(t, got.firstArrival(id).Before(d.restarted),
			"duplicate %s was first delivered after the restart: only what the killed process forwarded may come again", id)
	}
	require.Greater(t, got.distinct(), deliveredBefore, "the restarted service delivered")
	return d
}

// TestFaultKill9WhileStoringAndDispatching kills a `timeoutmill run` process with SIGKILL while
// 10,000 timeouts are being stored and dispatched, starts it again, and counts: none may be lost,
// and duplicates are bounded by what was in flight when it died. Neither process has a stable
// --instance (each takes the default, host name and process id), so ids the killed one claimed
// and never announced wait for their lease: the path of distinct instances.
func TestFaultKill9WhileStoringAndDispatching(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	d := killAndRestart(t, "crash", nil, nil, "no stable --instance: ids claimed but not announced wait for their lease, 1 min")
	line, ok := d.second.find("Gave back the claims an earlier run of this instance left")
	require.True(t, ok, "the second process took its own name")
	require.Contains(t, line.text, "released=0", "a new default name has no earlier claims to give back")

	d.second.signal(t, sigterm)
	code, _ := d.second.wait(t, time.Minute)
	require.Equal(t, 0, code, "a clean stop after the recovery")
}

// TestFaultKill9SameInstance is the crash drill with a stable --instance, as a StatefulSet pod or
// a systemd unit instance gives: the restart takes back at once what the killed run claimed, so
// every timeout due by the restart arrives within seconds of it (the figures say how many took
// over restartBound), none lost, duplicates within what was in flight at the kill. The claim
// lease is 5 min, so nothing else could deliver them that soon.
func TestFaultKill9SameInstance(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	name := []string{"--instance", "timeoutmill-crash-" + randomHex(t, 4), "--claim-lease", recoveryLease}
	d := killAndRestart(t, "crash-same", name, name, "same --instance: the restart gave back the killed run's claims")
	line, ok := d.second.find("Gave back the claims an earlier run of this instance left")
	require.True(t, ok, "the restart says what it gave back")
	t.Logf("the restart: %s", line.text)

	worstDue, beyond, dueByRestart, _ := d.waits(restartBound)
	require.Positive(t, dueByRestart, "the drill left timeouts due and undelivered at the restart")
	t.Logf("due by the restart: %d; the worst arrived %s after it; %d beyond %s", dueByRestart, worstDue.Round(time.Millisecond), beyond, restartBound)
	require.Less(t, worstDue, recoveryBound,
		"every timeout due by the restart arrived long before the claim lease (%s) would have let it go", recoveryLease)

	d.second.signal(t, sigterm)
	code, _ := d.second.wait(t, time.Minute)
	require.Equal(t, 0, code, "a clean stop after the recovery")
}

// TestFaultTwinInstanceIsRefused starts a second `timeoutmill run` with the --instance of a running
// one: it exits non-zero naming the instance, and the first keeps running and delivering. Once the
// first stopped cleanly, the name is free again.
func TestFaultTwinInstanceIsRefused(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	e := newEnv(t, "twin")
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	dest := e.queue("due")
	client := newBrokerClient(t, e.url)
	name := "timeoutmill-twin-" + randomHex(t, 4)
	args := runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--close-timeout", "10s", "--instance", name)
	first := startService(t, "twin-1", args...)
	got := client.consume(t, dest)

	twin := runCommand(t, "twin-2", args...)
	code, exitedAt := twin.wait(t, 2*time.Minute)
	require.NotZero(t, code, "the twin exits non-zero; its output:\n%s", twin.output())
	line, ok := twin.find("instance name in use")
	require.True(t, ok, "the twin says why; its output:\n%s", twin.output())
	require.Contains(t, line.text, name, "and names the instance")
	require.True(t, first.running(), "the first keeps running")

	msgs := newTimeouts(500, dest, time.Now().Add(time.Second), 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := client.send(ctx, wire.TimeoutsQueue(e.endpoint), msgs)
	require.NoError(t, err)
	require.True(t, got.waitDistinct(len(msgs), 2*time.Minute), "the first delivers on (%d of %d)", got.distinct(), len(msgs))
	got.quiet(time.Second, 10*time.Second)
	f := got.figures(ids(msgs))
	faultLog(t, "twin refused %s after its launch with exit code %d (%q); the first then delivered: %s",
		exitedAt.Sub(twin.started).Round(time.Millisecond), code, line.text, f)
	requireNoneLost(t, f)
	require.Zero(t, f.duplicated)

	first.signal(t, sigterm)
	code, _ = first.wait(t, time.Minute)
	require.Equal(t, 0, code)
	again := startService(t, "twin-3", args...) // the name was let go at the stop
	require.True(t, again.running())
	again.signal(t, sigterm)
	code, _ = again.wait(t, time.Minute)
	require.Equal(t, 0, code)
}

// TestFaultKill9ExactlyOnce is the crash case in the exactly-once mode: `timeoutmill run
// --exactly-once` with the SQL transport on the store's PostgreSQL database, so that forwarding
// a message (inserting it into its destination's table) and removing its timeout commit
// together. Killed with SIGKILL while storing and dispatching, then restarted: none lost, none
// duplicated. The destination's rows are counted in SQL, with nobody consuming them, so the
// figure is what the service wrote, not what a consumer saw.
func TestFaultKill9ExactlyOnce(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	count := 5000
	if !longFaultCases() {
		count = 2000
	}
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	endpoint := "fx-" + randomHex(t, 4)
	dest := endpoint + ".due"
	args := runArgs(endpoint, dsn, dsn, endpoint+".error", "--exactly-once", "--close-timeout", "10s")
	first := startService(t, "exactly-once-1", args...)

	pub, err := sqltransport.NewPublisher(context.Background(), sqltransport.Config{Dialect: sqltransport.PostgreSQL, DSN: dsn}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	delivered := func() (distinct, rows int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The table appears with the first forward.
		err := db.QueryRowContext(ctx, `SELECT count(DISTINCT uuid), count(*) FROM "watermill_`+dest+`"`).Scan(&distinct, &rows)
		if err != nil {
			return 0, 0
		}
		return distinct, rows
	}

	msgs := newTimeouts(count, dest, time.Now().Add(3*time.Second), 12*time.Second)
	sendStart := time.Now()
	go func() {
		for start := 0; start < len(msgs); start += 200 {
			batch := make([]*message.Message, 0, 200)
			for _, m := range msgs[start:min(start+200, len(msgs))] {
				wm := message.NewMessage(m.id, m.body)
				wm.Metadata.Set(wire.HeaderExpire, wireparse.FormatExpire(m.due))
				wm.Metadata.Set(wire.HeaderDestination, m.destination)
				batch = append(batch, wm)
			}
			if err := pub.Publish(wire.TimeoutsQueue(endpoint), batch...); err != nil {
				t.Errorf("publishing: %v", err)
				return
			}
		}
	}()
	require.Eventually(t, func() bool { d, _ := delivered(); return d >= count/10 }, 3*time.Minute, 100*time.Millisecond,
		"a tenth delivered before the crash")
	atKill, _ := delivered()
	storedAtKill := storedTimeouts(dsn, endpoint)
	first.kill()
	killedAt := time.Now()

	second := startService(t, "exactly-once-2", args...)
	require.Eventually(t, func() bool { d, _ := delivered(); return d >= count }, 4*time.Minute, 250*time.Millisecond,
		"all delivered after the restart")
	allAt := time.Now()
	require.Eventually(t, func() bool { return storedTimeouts(dsn, endpoint) == 0 }, 2*time.Minute, 250*time.Millisecond)
	time.Sleep(2 * time.Second) // a duplicate, if any, would be written now
	distinct, rows := delivered()

	var unknown int
	want := map[string]bool{}
	for _, id := range ids(msgs) {
		want[id] = true
	}
	rs, err := db.QueryContext(context.Background(), `SELECT DISTINCT uuid FROM "watermill_`+dest+`"`)
	require.NoError(t, err)
	for rs.Next() {
		var id string
		require.NoError(t, rs.Scan(&id))
		if !want[id] {
			unknown++
		}
	}
	require.NoError(t, rs.Err())
	f := figures{sent: count, delivered: distinct, lost: count - distinct, duplicated: rows - distinct, unknown: unknown}
	faultLog(t, "exactly once: %s; at the kill (%s after the first send): %d delivered, %d in the store; "+
		"all delivered %s after the restart",
		f, killedAt.Sub(sendStart).Round(time.Millisecond), atKill, storedAtKill, allAt.Sub(killedAt).Round(time.Millisecond))
	require.Zero(t, f.lost)
	require.Zero(t, f.unknown)
	require.Zero(t, f.duplicated, "exactly once: no duplicate after a crash")

	second.signal(t, sigterm)
	code, _ := second.wait(t, time.Minute)
	require.Equal(t, 0, code)
}
