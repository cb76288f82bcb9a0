package sqlite_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// TestCheckInfrastructure runs the SQL backends' check. Open and New create the table (unless
// MustExist), so the store under test has it dropped under its feet.
func TestCheckInfrastructure(t *testing.T) {
	t.Parallel()
	db := openDB(t, filepath.Join(t.TempDir(), "timeouts.db"))
	sqlstoretest.ChecksInfrastructure(t, func(ctx context.Context, endpoint string) (*sqlite.Store, error) {
		store, err := sqlite.New(ctx, db, sqlite.Config{Endpoint: endpoint})
		if err != nil {
			return nil, err
		}
		_, err = db.ExecContext(ctx, `DROP TABLE "`+endpoint+`.timeouts"`)
		return store, err
	}, func() int {
		var n int
		require.NoError(t, db.QueryRowContext(context.Background(),
			`SELECT count(*) FROM sqlite_schema WHERE type = 'table'`).Scan(&n))
		return n
	})
}

// TestMustExistCreatesNothing: with MustExist, Open on a missing file or table fails naming it,
// with persistence.ErrNotSetUp, and leaves the disk as it was: no file, no table, not even a file
// that is not a store switched to WAL mode.
func TestMustExistCreatesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()

	missing := filepath.Join(dir, "missing.db")
	_, err := sqlite.Open(ctx, sqlite.Config{Path: missing, Endpoint: "orders", MustExist: true})
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.ErrorContains(t, err, "sqlite: database file "+missing+" does not exist")
	require.NoFileExists(t, missing)

	// Another program's database, in the default rollback journal mode.
	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", "file:"+other)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `CREATE TABLE accounts (id INTEGER PRIMARY KEY)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before := snapshot(t, dir)
	_, err = sqlite.Open(ctx, sqlite.Config{Path: other, Endpoint: "orders", MustExist: true})
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.ErrorContains(t, err, `sqlite: table "orders.timeouts" does not exist in `+other)
	require.Equal(t, before, snapshot(t, dir), "the directory is byte for byte as it was")

	// Set up, the same file opens; a table whose name differs only in ASCII case is the same
	// table to SQLite, and so to the check.
	require.NoError(t, open(t, sqlite.Config{Path: other, Endpoint: "orders"}).Close())
	store := open(t, sqlite.Config{Path: other, Endpoint: "orders", MustExist: true})
	require.NoError(t, store.CheckInfrastructure(ctx))
	inserted, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
	require.NoError(t, err)
	require.True(t, inserted, "a store opened with MustExist works as any other")
	open(t, sqlite.Config{Path: other, Table: "ORDERS.TIMEOUTS", MustExist: true})

	_, err = sqlite.New(ctx, openDB(t, filepath.Join(dir, "new.db")), sqlite.Config{Endpoint: "orders", MustExist: true})
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.ErrorContains(t, err, `sqlite: table "orders.timeouts" does not exist`)
}

// snapshot returns the name and contents of every file in dir.
func snapshot(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string][32]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = sha256.Sum256(b)
	}
	return files
}

// TestOpenNamesThePath: an Open that cannot create or open the file says which file.
func TestOpenNamesThePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct{ path, want string }{
		"missing directory": {filepath.Join(dir, "no", "such", "dir", "t.db"),
			"sqlite: open " + filepath.Join(dir, "no", "such", "dir", "t.db") + ": directory " + filepath.Join(dir, "no", "such", "dir") + " does not exist"},
		"a directory":      {dir, "sqlite: open " + dir + ": it is a directory"},
		"under a file":     {filepath.Join(dir, "file", "t.db"), "sqlite: open " + filepath.Join(dir, "file", "t.db") + ": "},
		"unwritable place": {"/proc/timeoutmill-test.db", "sqlite: open /proc/timeoutmill-test.db: "},
	} {
		if name == "under a file" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o600))
		}
		_, err := sqlite.Open(t.Context(), sqlite.Config{Path: tc.path, Endpoint: "orders"})
		require.ErrorContains(t, err, tc.want, name)
	}
	_, err := os.Stat(filepath.Join(dir, "no"))
	require.ErrorIs(t, err, os.ErrNotExist, "no directory was made")
}
