package acceptance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

// TestSQLExactlyOnceFailureBetweenForwardAndRemove breaks a forward after its message was
// written to the destination's table, and shows that in exactly-once mode the message goes back
// with the transaction, the timeout stays, and once the fault is gone it is delivered exactly
// once. The faults are made in the database, so the code under test runs unchanged: a deferred
// trigger on the destination's table fires at COMMIT, after the publish, and counts in a sequence
// (which a rollback does not undo) how often the message was written.
//
// For contrast, the same kind of fault (removing fails after the publish) in the default
// at-least-once mode delivers the message more than once.
func TestSQLExactlyOnceFailureBetweenForwardAndRemove(t *testing.T) {
	t.Parallel()
	exactlyOnce := sqlBackend{name: "postgres-exactly-once", dialect: sqltransport.PostgreSQL, exactlyOnce: true}
	retryForever := func(c *timeouts.Config) {
		c.NumberOfRetries = 1000
		c.TimeToTriggerDispatchCircuitBreaker = time.Hour
	}

	t.Run("commit fails after the publish", func(t *testing.T) {
		t.Parallel()
		e := newSQLEnv(t, exactlyOnce, "commitfails")
		store := e.store(t)
		n := startSQLNode(t, e, store, retryForever)
		dest := "charges"
		e.exec(t, `CREATE SEQUENCE writes`)
		e.exec(t, `CREATE FUNCTION fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM nextval('writes'); RAISE EXCEPTION 'simulated failure after the publish'; END $$`)
		e.exec(t, `CREATE CONSTRAINT TRIGGER fail_commit AFTER INSERT ON `+e.table(t, dest)+`
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_commit()`)
		delivered := sqlReceive(t, e, dest)

		id := schedule(t, n, dest, 300*time.Millisecond)
		require.Eventually(t, func() bool { return failures(t, store, id) >= 3 }, lateBound, 20*time.Millisecond)
		require.Equal(t, 0, e.rows(t, dest), "no attempt left the message in its queue")
		require.Equal(t, 1, pending(t, store), "the timeout is kept")
		requireNothing(t, delivered, 200*time.Millisecond)
		writes := e.sequence(t, "writes")
		require.GreaterOrEqual(t, writes, 3, "the message was written, then taken back, each time")
		t.Logf("commit failed after the publish %d times: the message was written %d times and delivered 0 times", failures(t, store, id), writes)

		e.exec(t, `DROP TRIGGER fail_commit ON `+e.table(t, dest))
		got := await(t, delivered, lateBound)
		require.Equal(t, id, got.msg.UUID)
		requireNothing(t, delivered, 1500*time.Millisecond)
		require.Equal(t, 0, pending(t, store))
		t.Logf("fault removed: delivered once")
	})

	t.Run("connection dies during the commit", func(t *testing.T) {
		t.Parallel()
		e := newSQLEnv(t, exactlyOnce, "crash")
		store := e.store(t)
		n := startSQLNode(t, e, store, retryForever)
		dest := "charges"
		e.exec(t, `CREATE SEQUENCE writes`)
		// The commit hangs after the publish, until the test kills the connection: as if the
		// process died there.
		e.exec(t, `CREATE FUNCTION hang_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM nextval('writes'); PERFORM pg_sleep(60); RETURN NULL; END $$`)
		e.exec(t, `CREATE CONSTRAINT TRIGGER hang_commit AFTER INSERT ON `+e.table(t, dest)+`
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hang_commit()`)
		delivered := sqlReceive(t, e, dest)

		id := schedule(t, n, dest, 300*time.Millisecond)
		var pid int
		// The forward commits with COMMIT, or, as one statement that deletes the timeouts and
		// inserts their messages, at the end of that statement.
		forwarding := `WITH removed AS (DELETE FROM "` + e.schema + `".%`
		require.Eventually(t, func() bool {
			err := e.db.QueryRowContext(context.Background(), `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND wait_event = 'PgSleep' AND (lower(query) LIKE 'commit%' OR query LIKE $1)`, forwarding).Scan(&pid)
			return err == nil
		}, lateBound, 20*time.Millisecond, "a forward hanging in its commit")
		// Replace the trigger's function first (DROP TRIGGER would wait for the hanging
		// transaction's lock on the table), so that the next attempt commits.
		e.exec(t, `CREATE OR REPLACE FUNCTION hang_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM nextval('writes'); RETURN NULL; END $$`)
		e.exec(t, fmt.Sprintf(`SELECT pg_terminate_backend(%d)`, pid))
		t.Logf("killed the forwarding connection (pid %d) in the middle of its commit", pid)

		got := await(t, delivered, lateBound)
		require.Equal(t, id, got.msg.UUID)
		requireNothing(t, delivered, 1500*time.Millisecond)
		require.Equal(t, 0, pending(t, store))
		require.Equal(t, 2, e.sequence(t, "writes"), "written once before the crash, once after")
		t.Logf("after the crash the timeout was forwarded again: written twice, delivered once")
	})

	t.Run("at least once, for contrast: removing fails after the publish", func(t *testing.T) {
		t.Parallel()
		e := newSQLEnv(t, sqlBackend{name: "postgres", dialect: sqltransport.PostgreSQL}, "contrast")
		store := e.store(t)
		n := startSQLNode(t, e, store, func(c *timeouts.Config) { c.ClaimLease = time.Second })
		dest := "charges"
		storeTable := `"` + e.schema + `"."` + e.endpoint + `.timeouts"`
		e.exec(t, `CREATE FUNCTION fail_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'simulated failure removing the timeout'; END $$`)
		e.exec(t, `CREATE TRIGGER fail_remove BEFORE DELETE ON `+storeTable+` FOR EACH ROW EXECUTE FUNCTION fail_remove()`)
		delivered := sqlReceive(t, e, dest)

		id := schedule(t, n, dest, 300*time.Millisecond)
		first := await(t, delivered, lateBound)
		// The dispatcher retries the failing remove for up to 30 s before it gives up; the claim's
		// lease then brings the timeout back and it is forwarded a second time.
		second := await(t, delivered, 30*time.Second+lateBound)
		require.Equal(t, id, first.msg.UUID)
		require.Equal(t, id, second.msg.UUID, "delivered again when its claim ran out")
		e.exec(t, `DROP TRIGGER fail_remove ON `+storeTable)
		require.Eventually(t, func() bool { return pending(t, store) == 0 }, lateBound, 50*time.Millisecond)
		t.Logf("at least once: the message was delivered twice, %s apart, while removing its timeout failed",
			second.at.Sub(first.at).Round(time.Millisecond))
	})
}

// schedule publishes a delayed message to dest and returns its id.
func schedule(t *testing.T, n *sqlNode, dest string, delay time.Duration) string {
	t.Helper()
	msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 7"))
	timeouts.DeliverAfter(msg, delay)
	require.NoError(t, n.manager.Publisher().Publish(dest, msg))
	return msg.UUID
}

// failures is the stored failure count of a timeout, -1 when it is gone.
func failures(t *testing.T, store persistence.Store, id string) int {
	t.Helper()
	to, err := store.Peek(context.Background(), id)
	if errors.Is(err, persistence.ErrNotFound) {
		return -1
	}
	require.NoError(t, err)
	return to.FailureCount
}

func (e *sqlEnv) exec(t *testing.T, stmt string) {
	t.Helper()
	_, err := e.db.ExecContext(context.Background(), stmt)
	require.NoError(t, err, stmt)
}

// sequence is a PostgreSQL sequence's last value, 0 if never used.
func (e *sqlEnv) sequence(t *testing.T, name string) int {
	t.Helper()
	var (
		n      int
		called bool
	)
	require.NoError(t, e.db.QueryRowContext(context.Background(), `SELECT last_value, is_called FROM `+name).Scan(&n, &called))
	if !called {
		return 0
	}
	return n
}
