package sqlite

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// listPlan is SQLite's query plan of the statement List runs for opts, one line per step.
func listPlan(t *testing.T, s *Store, opts persistence.ListOptions) string {
	t.Helper()
	query, args := sqlstore.ListStatement(s.core, opts)
	return queryPlan(t, s, query, args...)
}

// queryPlan is SQLite's query plan of query with args, read on the store's readers, one line per
// step.
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.reader.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	return strings.Join(plan, "\n")
}

// requireListUsesDueIndex: the pages of List in due order (the first, one after a cursor, a due
// range) read the due index and sort only ties by id, never the whole table.
func requireListUsesDueIndex(t *testing.T, s *Store) {
	t.Helper()
	now := time.Now()
	index := s.table + "_due" // as the plan names it, unquoted
	for name, opts := range map[string]persistence.ListOptions{
		"first page":   {},
		"after cursor": {After: persistence.Position{Due: now, ID: "m"}},
		"due range":    {DueFrom: now, DueBefore: now.Add(time.Hour)},
	} {
		plan := listPlan(t, s, opts)
		require.Contains(t, plan, "USING INDEX "+index, "%s:\n%s", name, plan)
		require.NotContains(t, plan, "TEMP B-TREE FOR ORDER BY", "%s sorts the whole table:\n%s", name, plan)
	}
}

// TestListReadsTheDueIndex: List's pages on a store Open made are read from the due index.
func TestListReadsTheDueIndex(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "timeouts.db"), Endpoint: "orders"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	requireListUsesDueIndex(t, s)
}

// TestAddsDueIndexToPreviousTable: a table the previous version made, with every column but no
// due index, gets the index when the store opens it, and List pages through its timeouts in due
// order, then id, as before.
func TestAddsDueIndexToPreviousTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	db, err := sql.Open("sqlite", fileURI(path)+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	base := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	for _, stmt := range []string{
		`CREATE TABLE "orders.timeouts" (
	id TEXT NOT NULL PRIMARY KEY,
	destination TEXT NOT NULL,
	due INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	owner TEXT NOT NULL DEFAULT '',
	payload BLOB NOT NULL,
	metadata BLOB NOT NULL,
	failure_count INTEGER NOT NULL DEFAULT 0,
	dedup_key TEXT,
	parked_reason TEXT,
	claimed_by TEXT
)`,
		`CREATE INDEX "orders.timeouts_available_at" ON "orders.timeouts" (available_at)`,
		`CREATE INDEX "orders.timeouts_owner" ON "orders.timeouts" (owner) WHERE owner <> ''`,
		`CREATE UNIQUE INDEX "orders.timeouts_dedup_key" ON "orders.timeouts" (dedup_key) WHERE dedup_key IS NOT NULL`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	// Due order is neither id nor rowid (insertion) order, and two pairs share a due time.
	for _, r := range []struct {
		id      string
		minutes int
	}{{"a", 4}, {"b", 0}, {"c", 2}, {"d", 0}, {"e", 2}} {
		due := base.Add(time.Duration(r.minutes) * time.Minute).UnixMicro()
		_, err := db.ExecContext(ctx, `INSERT INTO "orders.timeouts" (id, destination, due, available_at, payload, metadata)
VALUES (?, 'billing', ?, ?, x'', x'')`, r.id, due, due)
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())

	s, err := Open(ctx, Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	var indexes int
	require.NoError(t, s.reader.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'orders.timeouts_due' AND tbl_name = 'orders.timeouts'`).Scan(&indexes))
	require.Equal(t, 1, indexes, "the due index was made")
	requireListUsesDueIndex(t, s)

	want := []string{"b", "d", "c", "e", "a"} // due +0, +0, +2, +2, +4 minutes; ties by id
	page, err := s.List(ctx, persistence.ListOptions{Limit: 2})
	require.NoError(t, err)
	got := ids(page)
	for len(page) > 0 {
		last := page[len(page)-1]
		page, err = s.List(ctx, persistence.ListOptions{Limit: 2, After: persistence.Position{Due: last.Due, ID: last.ID}})
		require.NoError(t, err)
		got = append(got, ids(page)...)
	}
	require.Equal(t, want, got)
	require.NoError(t, s.CheckInfrastructure(ctx))
}

func ids(ts []persistence.Timeout) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}
