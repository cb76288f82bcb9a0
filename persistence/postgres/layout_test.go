package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

// TestUpgradeFromTheOneTableLayout: a table of earlier versions, which kept each timeout's claim
// in an available_at column, is split into the schedule and the leases by SetupInfrastructure,
// and every timeout keeps its state: waiting, due, leased, lease run out, hidden.
func TestUpgradeFromTheOneTableLayout(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	ctx := t.Context()
	db := openDB(t, dsn)
	table := quote(schema) + `."orders.timeouts"`
	now := time.Now().UTC().Truncate(time.Microsecond)
	mark := persistence.HiddenFrom.Add(time.Hour)
	for _, stmt := range []string{
		`CREATE TABLE ` + table + ` (
	id text COLLATE "C" NOT NULL PRIMARY KEY, destination text NOT NULL, due timestamptz NOT NULL,
	available_at timestamptz NOT NULL, owner text COLLATE "C" NOT NULL DEFAULT '',
	payload bytea NOT NULL, metadata bytea NOT NULL, failure_count integer NOT NULL DEFAULT 0)`,
		`CREATE INDEX "orders.timeouts_available_at" ON ` + table + ` (available_at)`,
		`CREATE INDEX "orders.timeouts_owner" ON ` + table + ` USING hash (owner) WHERE owner <> ''`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	for _, row := range []struct {
		id               string
		due, availableAt time.Time
	}{
		{"waiting", now.Add(time.Hour), now.Add(time.Hour)},
		{"due", now.Add(-time.Minute), now.Add(-time.Minute)},
		{"leased", now.Add(-2 * time.Minute), now.Add(time.Minute)},
		{"ran-out", now.Add(-3 * time.Minute), now.Add(-30 * time.Second)},
		{"hidden", now.Add(2 * time.Hour), mark},
	} {
		_, err := db.ExecContext(ctx, `INSERT INTO `+table+` (id, destination, due, available_at, payload, metadata)
VALUES ($1, 'billing', $2, $3, '\x01', '\x')`, row.id, row.due, row.availableAt)
		require.NoError(t, err)
	}

	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	require.NoError(t, store.SetupInfrastructure(ctx), "again: nothing left to do")

	stats, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, stats.Pending)
	sv, err := store.Survey(ctx, persistence.MinDue)
	require.NoError(t, err)
	require.Equal(t, 1, sv.Hidden, "the hidden timeout stays hidden")
	claimed, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"ran-out", "due"}, claimed, "due and run-out timeouts are claimable, the live lease and the rest are not")
	next, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, next.Equal(now.Add(time.Minute)), "the live lease and the new ones end first: %s", next)
	got, err := store.Peek(ctx, "hidden")
	require.NoError(t, err)
	require.Equal(t, []byte{1}, got.Payload)

	_, err = db.ExecContext(ctx, `INSERT INTO `+table+` (id, destination, due, available_at, payload, metadata)
VALUES ('old-writer', 'billing', now(), now(), '\x', '\x')`)
	require.ErrorContains(t, err, "available_at", "a writer of the old layout fails instead of storing a timeout no poller sees")
}

// TestALeaseLeftByARemoveDuringAClaim reproduces the one race of the layout: a Remove that runs
// while a claim moves the same timeout from the schedule to the leases deletes the timeout but
// not the lease, which its snapshot does not see. The lease left behind is never announced: the
// next claim after it runs out deletes it, and it does not block the same id stored again.
func TestALeaseLeftByARemoveDuringAClaim(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	ctx := t.Context()
	db := openDB(t, dsn)
	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	_, schedule, leases := store.Tables()
	now := time.Now().UTC().Truncate(time.Microsecond)
	mustStoreOne(ctx, t, store, "x", now.Add(-time.Second))

	// The claim's own statements, held open in a transaction: the schedule row is deleted (and
	// so locked) and the lease inserted, not yet committed.
	claim, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = claim.ExecContext(ctx, `DELETE FROM `+schedule+` WHERE id = 'x'`)
	require.NoError(t, err)
	_, err = claim.ExecContext(ctx, `INSERT INTO `+leases+` (id, due, lease_until) VALUES ('x', $1, $2)`, now.Add(-time.Second), now.Add(time.Minute))
	require.NoError(t, err)

	removed := make(chan error, 1)
	go func() {
		ok, err := store.Remove(ctx, "x")
		if err == nil && !ok {
			err = errNotRemoved
		}
		removed <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%unscheduled%'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the Remove waits for the claim's lock on the schedule row")
	require.NoError(t, claim.Commit())
	require.NoError(t, <-removed)

	var left int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+leases).Scan(&left))
	require.Equal(t, 1, left, "the race leaves the lease behind")
	next, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, next.Equal(now.Add(time.Minute)), "Next sees the lease: %s", next)

	// The same id stored again is claimed, over the lease left behind.
	mustStoreOne(ctx, t, store, "x", now.Add(-time.Second))
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, ids)
	removedAgain, err := store.Remove(ctx, "x")
	require.NoError(t, err)
	require.True(t, removedAgain)

	// A lease left behind whose lease runs out is deleted by the next claim, never announced.
	_, err = db.ExecContext(ctx, `INSERT INTO `+leases+` (id, due, lease_until) VALUES ('y', $1, $2)`, now, now.Add(time.Minute))
	require.NoError(t, err)
	ids, err = store.ClaimDue(ctx, now.Add(2*time.Minute), 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids, "a lease without its timeout is not announced")
	_, ok, err = store.Next(ctx)
	require.NoError(t, err)
	require.False(t, ok, "and is gone")
}

var errNotRemoved = errors.New("remove found nothing to remove")

func mustStoreOne(ctx context.Context, t *testing.T, store *postgres.Store, id string, due time.Time) {
	t.Helper()
	stored, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "billing", Due: due})
	require.NoError(t, err)
	require.True(t, stored)
}
