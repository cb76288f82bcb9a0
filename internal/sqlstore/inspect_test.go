package sqlstore

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// listStore is a store that only makes statements (no database).
func listStore(t *testing.T, b Binding, top bool) *Store {
	t.Helper()
	q := Standard(`"t"`, b.Style)
	q.List.Top = top
	s, err := New(Dialect{Name: "test", SQL: q, Bind: b})
	require.NoError(t, err)
	return s
}

// TestListStatementStyles: List's statement, made for the filters set, binds each in the
// dialect's style: the keyset's due time is bound once where the style allows, three times with ?.
func TestListStatementStyles(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	opts := persistence.ListOptions{Owner: "o", After: persistence.Position{Due: at, ID: "a"}, Limit: 7}

	query, args := ListStatement(listStore(t, Binding{Style: Positional, Times: TimeUnixMicro}, false), opts)
	require.Contains(t, query, "owner = ? AND owner <> ''")
	require.Contains(t, query, "due >= ? AND (due > ? OR due = ? AND id > ?)")
	require.Contains(t, query, "ORDER BY due, id LIMIT ?")
	us := at.UnixMicro()
	require.Equal(t, []any{"o", us, us, us, "a", int64(7)}, args)

	query, args = ListStatement(listStore(t, Binding{Style: Numbered, Times: TimeValue}, false), opts)
	require.Contains(t, query, "due >= $2 AND (due > $2 OR due = $2 AND id > $3)")
	require.Contains(t, query, "LIMIT $4")
	require.Equal(t, []any{"o", at, "a", int64(7)}, args)

	query, args = ListStatement(listStore(t, Binding{Style: Named, Times: TimeValue}, true), persistence.ListOptions{})
	require.Contains(t, query, "SELECT TOP (@limit) ")
	require.NotContains(t, query, "LIMIT")
	require.NotContains(t, query, "WHERE")
	require.Equal(t, []any{sql.Named("limit", int64(100))}, args, "the documented default limit")
}
