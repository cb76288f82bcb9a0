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
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// inflightPerInstance bounds the duplicates one crashed `timeoutmill run` can cause: the command
// hands out at most connect.ServiceConsumers messages of each satellite queue at once, so at the
// moment of a kill -9 at most that many dispatcher messages are in flight (the dispatch satellite forwards them together, then removes
// them together). One whose timeout was forwarded but not yet removed is forwarded again after the
// restart. Nothing else is forwarded twice: claimed ids that were never announced are claimed
// again when their lease runs out, and announced ones are looked up before they are forwarded.
const inflightPerInstance = connect.ServiceConsumers

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
	faultLog(t, "%s (error queue %d); at the kill: %d delivered, %d stored (the rest still being sent and stored), %d waiting in the Timeouts queue, %d ids waiting for dispatch; "+
		"restart %s after the kill; all delivered %s after the restart (ids claimed but not announced wait for their lease, 1 min); store drained %s later; duplicates allowed: %d",
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
