package sqlite_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) persistence.Store {
		store, err := sqlite.Open(t.Context(), sqlite.Config{
			Path:     filepath.Join(t.TempDir(), "timeouts.db"),
			Endpoint: "orders",
		})
		require.NoError(t, err)
		return store
	})
}

// TestStoreOnCallersDB runs the suite on a store made by New, whose *sql.DB serves reads and
// writes alike.
func TestStoreOnCallersDB(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) persistence.Store {
		db := openDB(t, filepath.Join(t.TempDir(), "timeouts.db"))
		store, err := sqlite.New(t.Context(), db, sqlite.Config{Endpoint: "orders"})
		require.NoError(t, err)
		return store
	})
}

func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

func open(t *testing.T, config sqlite.Config) *sqlite.Store {
	t.Helper()
	store, err := sqlite.Open(t.Context(), config)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	return store
}

func TestReopenFindsTimeouts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	config := sqlite.Config{Path: filepath.Join(t.TempDir(), "timeouts.db"), Endpoint: "orders"}
	now := time.Now().UTC().Truncate(time.Microsecond)
	want := []persistence.Timeout{
		{ID: "a", Destination: "billing", Due: now, Payload: []byte("A"), Metadata: map[string]string{"k": "v"}},
		{ID: "b", Destination: "billing", Due: now.Add(time.Hour), Owner: "order-1", Payload: []byte("B")},
	}

	first, err := sqlite.Open(ctx, config)
	require.NoError(t, err)
	for _, to := range want {
		_, err := first.Store(ctx, to)
		require.NoError(t, err)
	}
	ids, err := first.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
	ok, err := first.IncrementFailureCount(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, first.Close())

	second := open(t, config)
	for _, w := range want {
		got, err := second.Peek(ctx, w.ID)
		require.NoError(t, err, "after reopening")
		require.Equal(t, w.Payload, got.Payload)
		require.True(t, w.Due.Equal(got.Due))
		require.Equal(t, w.Owner, got.Owner)
	}
	got, err := second.Peek(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 1, got.FailureCount, "the failure count survives a restart")
	require.Equal(t, map[string]string{"k": "v"}, got.Metadata)

	// The claim's lease survives too: a restarted poller does not dispatch "a" twice at once.
	ids, err = second.ClaimDue(ctx, now.Add(time.Second), 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids)
	ids, err = second.ClaimDue(ctx, now.Add(time.Minute), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
}

// TestTwoProcessesShareAFile opens the same file twice, as two processes would, and claims from
// both at once: each has its own writer connection, so they contend through SQLite's file lock.
func TestTwoProcessesShareAFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	config := sqlite.Config{Path: filepath.Join(t.TempDir(), "timeouts.db"), Endpoint: "orders"}
	stores := []*sqlite.Store{open(t, config), open(t, config)}
	now := time.Now()
	const n = 2000
	for i := range n {
		_, err := stores[i%2].Store(ctx, persistence.Timeout{
			ID: fmt.Sprintf("p%04d", i), Destination: "billing", Due: now.Add(-time.Minute),
		})
		require.NoError(t, err)
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  []string
		errs = make(chan error, 4)
	)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ids, err := stores[i%2].ClaimDue(ctx, now, 20, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				if len(ids) == 0 {
					return
				}
				mu.Lock()
				all = append(all, ids...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	slices.Sort(all)
	require.Len(t, slices.Compact(all), n, "every id claimed once")
	require.Len(t, all, n)
}

func TestHostileTableNames(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	db := openDB(t, path)
	_, err := db.ExecContext(ctx, `CREATE TABLE x (n INTEGER)`)
	require.NoError(t, err)

	endpoints := []string{
		`o"rders`,
		`orders; DELETE FROM x`,
		`"; DROP TABLE x; --`,
		`it's`,
		"ordres-été 注文",
		`[brackets]`,
	}
	for _, endpoint := range endpoints {
		store := open(t, sqlite.Config{Path: path, Endpoint: endpoint})
		_, err := store.Store(ctx, persistence.Timeout{ID: "id", Destination: endpoint, Due: time.Now()})
		require.NoError(t, err, endpoint)
		got, err := store.Peek(ctx, "id")
		require.NoError(t, err, endpoint)
		require.Equal(t, endpoint, got.Destination)

		var name string
		err = db.QueryRowContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name = ?`,
			endpoint+".timeouts").Scan(&name)
		require.NoError(t, err, "table named exactly %q", endpoint+".timeouts")
	}

	var tables int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table'`).Scan(&tables))
	require.Equal(t, len(endpoints)+1, tables, "one table per endpoint, and x")
	_, err = db.ExecContext(ctx, `INSERT INTO x (n) VALUES (1)`)
	require.NoError(t, err, "table x survives")
}

func TestPathWithURICharacters(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "what?#100% sure.db")
	store := open(t, sqlite.Config{Path: path, Endpoint: "orders"})
	_, err := store.Store(t.Context(), persistence.Timeout{ID: "id", Destination: "billing", Due: time.Now()})
	require.NoError(t, err)
	require.FileExists(t, path)
}

func TestNewLeavesDBOpen(t *testing.T) {
	t.Parallel()
	db := openDB(t, filepath.Join(t.TempDir(), "timeouts.db"))
	store, err := sqlite.New(t.Context(), db, sqlite.Config{Table: "timeouts"})
	require.NoError(t, err)
	require.NoError(t, store.Close())
	require.NoError(t, db.PingContext(t.Context()), "Close leaves the caller's db open")

	var name string
	require.NoError(t, db.QueryRowContext(t.Context(),
		`SELECT name FROM sqlite_schema WHERE type = 'table'`).Scan(&name))
	require.Equal(t, "timeouts", name, "Table overrides the name made from Endpoint")

	_, err = sqlite.New(t.Context(), nil, sqlite.Config{Table: "timeouts"})
	require.Error(t, err)
}

func TestSetupInfrastructureIsIdempotent(t *testing.T) {
	t.Parallel()
	store := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "timeouts.db"), Endpoint: "orders"})
	_, err := store.Store(t.Context(), persistence.Timeout{ID: "id", Destination: "billing", Due: time.Now()})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(t.Context()))
	_, err = store.Peek(t.Context(), "id")
	require.NoError(t, err, "setting up again keeps what is stored")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := map[string]struct {
		config sqlite.Config
		want   string
	}{
		"no table":          {sqlite.Config{Path: filepath.Join(dir, "a.db")}, "Endpoint or Table must be set"},
		"reserved table":    {sqlite.Config{Path: filepath.Join(dir, "a.db"), Table: "sqlite_timeouts"}, "reserves"},
		"NUL in table":      {sqlite.Config{Path: filepath.Join(dir, "a.db"), Endpoint: "a\x00b"}, "NUL"},
		"invalid UTF-8":     {sqlite.Config{Path: filepath.Join(dir, "a.db"), Endpoint: "a\xffb"}, "UTF-8"},
		"bad synchronous":   {sqlite.Config{Path: filepath.Join(dir, "a.db"), Endpoint: "e", Synchronous: "SOMETIMES"}, "Synchronous"},
		"negative busy":     {sqlite.Config{Path: filepath.Join(dir, "a.db"), Endpoint: "e", BusyTimeout: -time.Second}, "BusyTimeout"},
		"no path":           {sqlite.Config{Endpoint: "e"}, "Path must be set"},
		"in-memory path":    {sqlite.Config{Path: ":memory:", Endpoint: "e"}, "persistence/memory"},
		"table name length": {sqlite.Config{Path: filepath.Join(dir, "a.db"), Table: string(make([]byte, 300))}, "longer than"},
	}
	for name, tc := range cases {
		_, err := sqlite.Open(t.Context(), tc.config)
		require.ErrorContains(t, err, tc.want, name)
	}

	require.NoError(t, sqlite.Config{Endpoint: "orders", Synchronous: "full"}.Validate())
	require.Error(t, sqlite.Config{}.Validate())
}

// TestUnopened: every call on a Store that Open or New did not make fails, saying so.
func TestUnopened(t *testing.T) {
	t.Parallel()
	sqlstoretest.Unopened(t, "sqlite", &sqlite.Store{}) // a nil *Store is refused by timeouts.NewManager
}
