package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// TestScheduleTx: scheduling in the caller's transaction, on a *sql.DB the caller shares with
// the store, opened as the package documents for it.
func TestScheduleTx(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	db, err := sql.Open("sqlite", "file:"+path+
		"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := sqlite.New(t.Context(), db, sqlite.Config{Endpoint: "orders"})
	require.NoError(t, err)
	sqlstoretest.ScheduleTx(t, db, store)
}

// TestMigratesOldTable: a file whose table an older version created, with a timeout in it, gets
// the key column and its index when the store opens it.
func TestMigratesOldTable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	db := openDB(t, path)
	for _, stmt := range []string{
		`CREATE TABLE "orders.timeouts" (
	id TEXT NOT NULL PRIMARY KEY,
	destination TEXT NOT NULL,
	due INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	owner TEXT NOT NULL DEFAULT '',
	payload BLOB NOT NULL,
	metadata BLOB NOT NULL,
	failure_count INTEGER NOT NULL DEFAULT 0
)`,
		`CREATE INDEX "orders.timeouts_available_at" ON "orders.timeouts" (available_at)`,
		`INSERT INTO "orders.timeouts" VALUES ('old', 'orders', unixepoch() * 1000000, unixepoch() * 1000000, '', x'', x'', 0)`,
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
	// A read-only open (as the commands that only look do) finds the table not set up.
	_, err := sqlite.Open(t.Context(), sqlite.Config{Path: path, Endpoint: "orders", MustExist: true})
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.ErrorContains(t, err, "older version")
	store, err := sqlite.Open(t.Context(), sqlite.Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	sqlstoretest.Migrated(t, store, "old")
}

// TestHoldsAcrossPools: an instance name held by one store on the file cannot be taken by
// another store on it (another process would open the file as this second store does) until it
// is released or the holder closed.
func TestHoldsAcrossPools(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	sqlstoretest.HoldsAcrossPools(t, func(ctx context.Context) (*sqlite.Store, error) {
		return sqlite.Open(ctx, sqlite.Config{Path: path, Endpoint: "orders"})
	})
}

// TestHoldInMemory: a database in memory has no file to lock: the store holds names for its own
// callers.
func TestHoldInMemory(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := sqlite.New(t.Context(), db, sqlite.Config{Endpoint: "orders"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	release, err := store.HoldInstance(t.Context(), "a")
	require.NoError(t, err)
	_, err = store.HoldInstance(t.Context(), "a")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse)
	require.NoError(t, release())
	release, err = store.HoldInstance(t.Context(), "a")
	require.NoError(t, err)
	require.NoError(t, release())
}
