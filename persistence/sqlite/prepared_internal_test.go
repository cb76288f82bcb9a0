package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// TestIDListsAreBoundAtFewSizes: a list of n ids is bound as a list of the next power of two,
// its last id repeated, so that the statements prepared for those sizes serve every batch.
func TestIDListsAreBoundAtFewSizes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 5: 8, 64: 64, 65: 128, 256: 256, 300: 512, maxIn: maxIn} {
		require.Equal(t, want, inSize(n), "inSize(%d)", n)
	}
	require.Equal(t, []any{"a", "b", "c", "c"}, idArgs([]string{"a", "b", "c"}))
	require.Equal(t, []any{"a"}, idArgs([]string{"a"}))
	require.Contains(t, inSizes(), maxIn)
}

// TestTheStatementsOfABacklogArePrepared: the statements a backlog runs for each timeout (the
// insert, the claim, the lookup and the removal of a batch of any size) are prepared when the
// store opens, with Open and with New, so that SQLite does not parse them on every call; the
// statements outlive no store (Close closes them, and New's pool stays usable).
func TestTheStatementsOfABacklogArePrepared(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	opened, err := Open(t.Context(), Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	db, err := sql.Open("sqlite", fileURI(filepath.Join(t.TempDir(), "new.db"))+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	made, err := New(t.Context(), db, Config{Endpoint: "orders"})
	require.NoError(t, err)

	for name, s := range map[string]*Store{"Open": opened, "New": made} {
		c, st := s.q.core, sqlstore.StatementsOf(s.core)
		for _, q := range []string{st.Store.SQL, st.Claim.SQL, st.Next.SQL, c.RemoveIn(1), c.RemoveIn(37), c.RemoveIn(256), c.PeekIn(3), c.PeekIn(maxIn)} {
			require.Contains(t, s.prep.stmts, q, "%s: not prepared:\n%s", name, q)
		}
		require.NoError(t, s.Close(), name)
	}
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM "orders.timeouts"`).Scan(&n), "New's pool is open after Close")
}
