package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// TestIDListsAreBoundAtFewSizes: lists are padded (sqlstore.InSize) up to maxIn, a size the
// store prepares, so that the statements prepared serve every batch.
func TestIDListsAreBoundAtFewSizes(t *testing.T) {
	t.Parallel()
	require.True(t, binding().PadIn)
	require.Equal(t, maxIn, sqlstore.InSize(maxIn), "maxIn is a power of two")
	require.Contains(t, sqlstore.InSizes(maxIn), maxIn)
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
		for _, q := range []string{st.Store.SQL, st.Claim.SQL, st.Next.SQL, c.RemoveIn(1), c.RemoveIn(sqlstore.InSize(37)), c.RemoveIn(256), c.PeekIn(sqlstore.InSize(3)), c.PeekIn(maxIn)} {
			require.Contains(t, s.prep.stmts, q, "%s: not prepared:\n%s", name, q)
		}
		require.NoError(t, s.Close(), name)
	}
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM "orders.timeouts"`).Scan(&n), "New's pool is open after Close")
}
