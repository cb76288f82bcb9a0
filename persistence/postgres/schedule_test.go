package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

// TestScheduleTx: scheduling in the caller's transaction, on a store and transactions that share
// the caller's pool.
func TestScheduleTx(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	store, err := postgres.New(db, postgres.Config{Schema: schema, Endpoint: "orders"})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(t.Context()))
	sqlstoretest.ScheduleTx(t, db, store)
}

// TestMigratesOldTable: a table of the shape an older version created, with a timeout in it,
// gets the key column and the new indexes from SetupInfrastructure.
func TestMigratesOldTable(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	ctx := t.Context()
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
		`INSERT INTO ` + table + ` VALUES ('old', 'orders', now(), now(), '', '', '', 0)`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	config := postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"}
	before, err := postgres.Open(ctx, config)
	require.NoError(t, err)
	sqlstoretest.OldTableChecked(t, before, "orders.timeouts")
	require.NoError(t, before.Close())
	sqlstoretest.SetupAtOnce(t, func(ctx context.Context) (*postgres.Store, error) { return postgres.Open(ctx, config) },
		"instances migrating an old table at once")
	sqlstoretest.Migrated(t, open(t, config), "old")
	var indexes int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1`, schema).Scan(&indexes))
	require.Equal(t, 10, indexes, "primary key, available_at, owner, dedup_key, due_id, parked, claimed, claimed_by, and the owners' key and counts")
}

// TestCountsOnPreviousTable: a table the previous release made, in use, gets the counts Stats
// reads from SetupInfrastructure, starting from what it holds, parked timeouts included; from
// then on they follow every change.
func TestCountsOnPreviousTable(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	ctx := t.Context()
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
	failure_count integer NOT NULL DEFAULT 0,
	dedup_key text COLLATE "C",
	parked_reason text,
	claimed_by text COLLATE "C"
)`,
		`CREATE INDEX "orders.timeouts_available_at" ON ` + table + ` (available_at)`,
		`CREATE INDEX "orders.timeouts_owner" ON ` + table + ` USING hash (owner) WHERE owner <> ''`,
		`CREATE UNIQUE INDEX "orders.timeouts_dedup_key" ON ` + table + ` (dedup_key) WHERE dedup_key IS NOT NULL`,
		`CREATE INDEX "orders.timeouts_due_id" ON ` + table + ` (due, id)`,
		`INSERT INTO ` + table + ` (id, destination, due, available_at, payload, metadata)
	SELECT 'old' || g, 'd' || (g % 3), now() - interval '1 hour' + g * interval '1 second', now() - interval '1 hour' + g * interval '1 second', '', ''
	FROM generate_series(1, 7200) AS g`,
		`UPDATE ` + table + ` SET parked_reason = 'failed', available_at = '9999-12-31 23:59:59.999999+00' WHERE id IN ('old1', 'old2', 'old7000')`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	config := postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"}
	before, err := postgres.Open(ctx, config)
	require.NoError(t, err)
	sqlstoretest.OldTableChecked(t, before, "orders.timeouts")
	_, err = before.Stats(ctx, time.Now())
	require.ErrorIs(t, err, persistence.ErrNotSetUp, "no counts yet")
	require.NoError(t, before.Close())
	sqlstoretest.SetupAtOnce(t, func(ctx context.Context) (*postgres.Store, error) { return postgres.Open(ctx, config) },
		"instances adding the counts at once")
	store := open(t, config)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	sqlstoretest.StatsMatchTable(t, store, db, table)
	st, err := store.Stats(ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, 7200, st.Pending)
	require.Equal(t, 3, st.Parked)
	require.Equal(t, map[string]int{"d0": 2400, "d1": 2400, "d2": 2400}, st.ByDestination)

	// The previous release's instances, still running, change the table as they did.
	for _, stmt := range []string{
		`DELETE FROM ` + table + ` WHERE id IN ('old3', 'old4', 'old1')`,
		`INSERT INTO ` + table + ` (id, destination, due, available_at, payload, metadata) VALUES ('new', 'd9', now(), now(), '', '')`,
		`UPDATE ` + table + ` SET parked_reason = NULL, available_at = due WHERE id = 'old2'`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	sqlstoretest.StatsMatchTable(t, store, db, table)
	st, err = store.Stats(ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, 7198, st.Pending)
	require.Equal(t, 1, st.Parked)
	require.Equal(t, 1, st.ByDestination["d9"])

	_, err = db.ExecContext(ctx, `TRUNCATE `+table)
	require.NoError(t, err)
	st, err = store.Stats(ctx, time.Now())
	require.NoError(t, err)
	require.Zero(t, st.Pending, "TRUNCATE empties the counts too")
	require.Empty(t, st.ByDestination)
}
