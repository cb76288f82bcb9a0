package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
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
	require.Equal(t, 5, indexes, "primary key, available_at, owner, dedup_key, due_id")
}
