package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

// TestAClaimMovesTimeoutsToTheClaimedTable: a claim moves what it takes out of the big table, and
// a claim after the lease takes it again where it is.
func TestAClaimMovesTimeoutsToTheClaimedTable(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	now := time.Now().UTC()
	for _, id := range []string{"due", "later"} {
		due := now.Add(-time.Second)
		if id == "later" {
			due = now.Add(time.Hour)
		}
		_, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "d", Due: due})
		require.NoError(t, err)
	}
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"due"}, ids)
	require.Equal(t, map[string][]string{"orders.timeouts": {"later"}, "orders.timeouts_claimed": {"due"}}, rowsOf(t, store, schema))

	ids, err = store.ClaimDue(ctx, now.Add(2*time.Minute), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"due"}, ids, "claimed again once its lease ran out")
	require.Equal(t, map[string][]string{"orders.timeouts": {"later"}, "orders.timeouts_claimed": {"due"}}, rowsOf(t, store, schema))

	removed, err := store.Remove(ctx, "due")
	require.NoError(t, err)
	require.True(t, removed)
	require.Equal(t, map[string][]string{"orders.timeouts": {"later"}}, rowsOf(t, store, schema))
}

// TestAStoreWhileAClaimMovesItsIDStoresNothing: a message of the timeouts queue redelivered after
// its timeout was stored must not store it twice, even while a claim is moving it to the claimed
// table, whose ids the insert's primary key does not see. The claim is held open in a
// transaction of the test's (it does what ClaimDue does), and the store must wait for it, then
// find the id claimed.
func TestAStoreWhileAClaimMovesItsIDStoresNothing(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	timeout := persistence.Timeout{ID: "x", Destination: "d", Due: time.Now().Add(-time.Second)}
	stored, err := store.Store(ctx, timeout)
	require.NoError(t, err)
	require.True(t, stored)

	db := openDB(t, dsn)
	claim, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = claim.Rollback() }()
	_, err = claim.ExecContext(ctx, `WITH moved AS (DELETE FROM `+quote(schema)+`."orders.timeouts" RETURNING *)
INSERT INTO `+quote(schema)+`."orders.timeouts_claimed" SELECT * FROM moved`)
	require.NoError(t, err)

	type result struct {
		stored bool
		err    error
	}
	done := make(chan result, 1)
	go func() {
		stored, err := store.Store(ctx, timeout)
		done <- result{stored, err}
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO%'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the store waits for the claim that deleted the row it conflicts with")
	require.NoError(t, claim.Commit())

	r := <-done
	require.NoError(t, r.err)
	require.False(t, r.stored, "the timeout was stored already: it is claimed")
	require.Equal(t, map[string][]string{"orders.timeouts_claimed": {"x"}}, rowsOf(t, store, schema),
		"one row, the claimed one")

	// The same through StoreMany.
	inserted, err := store.StoreMany(ctx, []persistence.Timeout{timeout, {ID: "y", Destination: "d", Due: timeout.Due}})
	require.NoError(t, err)
	require.Equal(t, []string{"y"}, inserted)
	require.Equal(t, map[string][]string{"orders.timeouts": {"y"}, "orders.timeouts_claimed": {"x"}}, rowsOf(t, store, schema))
}

// TestATableOfTheOneTableLayoutIsKept: a table made before the claimed table existed, with a
// timeout claimed in place, is used as it is: SetupInfrastructure adds the claimed table, the
// old claim is honoured until its lease ends, and the timeout is then claimed, peeked and removed
// as any other.
func TestATableOfTheOneTableLayoutIsKept(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	table := quote(schema) + `."orders.timeouts"`
	for _, stmt := range []string{
		`CREATE TABLE ` + table + ` (
	id text COLLATE "C" NOT NULL PRIMARY KEY,
	destination text NOT NULL,
	due timestamptz NOT NULL,
	available_at timestamptz NOT NULL,
	owner text COLLATE "C" NOT NULL DEFAULT '',
	payload bytea NOT NULL,
	metadata bytea NOT NULL,
	failure_count integer NOT NULL DEFAULT 0
)`,
		`CREATE INDEX "orders.timeouts_available_at" ON ` + table + ` (available_at)`,
		`CREATE INDEX "orders.timeouts_owner" ON ` + table + ` USING hash (owner) WHERE owner <> ''`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err)
	}
	md := persistence.EncodeMetadata(map[string]string{"k": "v"})
	_, err := db.ExecContext(ctx, `INSERT INTO `+table+` VALUES
	('leased', 'd', $1, $2, '', 'p', $3, 1),
	('free', 'd', $1, $1, '', 'q', $3, 0)`, now.Add(-time.Minute), now.Add(time.Minute), md)
	require.NoError(t, err)

	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	next, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, now.Add(-time.Minute), next)

	ids, err := store.ClaimDue(ctx, now, 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"free"}, ids, "the old layout's lease is honoured")
	peeked, err := store.Peek(ctx, "leased")
	require.NoError(t, err, "a timeout the old layout claimed is still found")
	require.Equal(t, persistence.Timeout{ID: "leased", Destination: "d", Due: now.Add(-time.Minute), Payload: []byte("p"),
		Metadata: map[string]string{"k": "v"}, FailureCount: 1}, peeked)
	ids, err = store.ClaimDue(ctx, now.Add(2*time.Minute), 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"leased"}, ids, "claimed when the old lease is over")
	for _, id := range []string{"leased", "free"} {
		removed, err := store.Remove(ctx, id)
		require.NoError(t, err)
		require.True(t, removed, id)
	}
	require.Empty(t, rowsOf(t, store, schema))
}

// rowsOf returns the ids in each of the store's tables in schema, by table name; empty tables are
// left out.
func rowsOf(t *testing.T, store *postgres.Store, schema string) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows := map[string][]string{}
	for _, table := range []string{"orders.timeouts", "orders.timeouts_claimed"} {
		r, err := store.DB().QueryContext(ctx, `SELECT id FROM `+quote(schema)+`.`+quote(table)+` ORDER BY id`)
		require.NoError(t, err)
		for r.Next() {
			var id string
			require.NoError(t, r.Scan(&id))
			rows[table] = append(rows[table], id)
		}
		require.NoError(t, r.Err())
		require.NoError(t, r.Close())
	}
	return rows
}
