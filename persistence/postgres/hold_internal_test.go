package postgres

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// TestHoldLostWithItsSession: when the server ends the session that holds an instance name (a
// dead connection, an administrator's pg_terminate_backend), the name is free for another
// process, and the first store's release still succeeds. Nothing else depends on the hold: no
// timeout is lost.
func TestHoldLostWithItsSession(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	ctx := t.Context()
	open := func() *Store {
		store, err := Open(ctx, Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
		require.NoError(t, err)
		require.NoError(t, store.SetupInfrastructure(ctx))
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		return store
	}
	a, b := open(), open()
	release, err := a.HoldInstance(ctx, "orders-1")
	require.NoError(t, err)
	_, err = b.HoldInstance(ctx, "orders-1")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse)

	// End exactly the session holding this lock: the one-bigint key is split into classid (high
	// 32 bits) and objid (low 32 bits), objsubid 1.
	key := a.q.instanceLock("orders-1")
	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer admin.Close()
	var ended int
	require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM (
	SELECT pg_terminate_backend(pid) FROM pg_locks
	WHERE locktype = 'advisory' AND objsubid = 1 AND granted
		AND classid::bigint = ($1::bigint >> 32) & 4294967295 AND objid::bigint = $1::bigint & 4294967295
) AS t`, key).Scan(&ended))
	require.Equal(t, 1, ended, "one session held it")

	// The server ends the session at once, but asynchronously: generous bounds, never a speed.
	var taken func() error
	require.Eventually(t, func() bool {
		taken, err = b.HoldInstance(context.Background(), "orders-1")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the name is free once its session ended")
	require.NoError(t, taken())
	require.NoError(t, release(), "releasing a hold whose session ended is not an error")
}

// TestHoldTakenAgainAfterItsSessionEnded: when the session holding a name ends (a dead
// connection, a failover to a standby that never had the lock) and nobody takes the name
// meanwhile, the store takes it again by itself on a new connection within a check or two, and
// another holder is refused again.
func TestHoldTakenAgainAfterItsSessionEnded(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	ctx := t.Context()
	open := func() *Store {
		store, err := Open(ctx, Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
		require.NoError(t, err)
		require.NoError(t, store.SetupInfrastructure(ctx))
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		return store
	}
	a, b := open(), open()
	release, err := a.HoldInstance(ctx, "orders-1")
	require.NoError(t, err)
	key := a.q.instanceLock("orders-1")
	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer admin.Close()
	holder := func() (pid int) {
		err := admin.QueryRowContext(ctx, `SELECT COALESCE(max(pid), 0) FROM pg_locks
	WHERE locktype = 'advisory' AND objsubid = 1 AND granted
		AND classid::bigint = ($1::bigint >> 32) & 4294967295 AND objid::bigint = $1::bigint & 4294967295`, key).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	first := holder()
	require.NotZero(t, first)
	var ended bool
	require.NoError(t, admin.QueryRowContext(ctx, `SELECT pg_terminate_backend($1)`, first).Scan(&ended))
	require.True(t, ended)

	start := time.Now()
	require.Eventually(t, func() bool { p := holder(); return p != 0 && p != first }, 4*sqlstore.HoldCheckInterval, 50*time.Millisecond,
		"the name held again by a new session")
	t.Logf("held again %s after its session ended (checks every %s)", time.Since(start).Round(time.Millisecond), sqlstore.HoldCheckInterval)
	_, err = b.HoldInstance(ctx, "orders-1")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse, "another holder is refused again")
	require.NoError(t, release())
	again, err := b.HoldInstance(ctx, "orders-1")
	require.NoError(t, err, "released: the name is free")
	require.NoError(t, again())
}

// TestHoldReleasedByCloseAndByItsHolder: a store closed while a manager still holds a name
// (a stop racing Close) releases the hold once; the holder's own release afterwards is a no-op,
// never a second release of the same connection (which panicked: close of a closed channel).
func TestHoldReleasedByCloseAndByItsHolder(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	ctx := t.Context()
	store, err := Open(ctx, Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(ctx))
	release, err := store.HoldInstance(ctx, "orders-2")
	require.NoError(t, err)

	require.NoError(t, store.Close())
	require.NotPanics(t, func() { require.NoError(t, release()) })

	other, err := Open(ctx, Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	again, err := other.HoldInstance(ctx, "orders-2")
	require.NoError(t, err, "the name is free once the closed store released it")
	require.NoError(t, again())
}
