package sqlite

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// TestStatementsCompile: every statement of the store compiles for SQLite, with a plain name and
// with one that holds an @, quotes and comment marks, so that a parameter misspelt in the SQL
// fails here rather than when the store opens.
func TestStatementsCompile(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"orders.timeouts", `t"@x' -- /*`} {
		require.NoError(t, validateTable(table))
		_, err := sqlstore.New(sqlstore.Dialect{Name: "sqlite", SQL: newQueries(table).core, Bind: binding()})
		require.NoError(t, err, table)
	}
	q := newQueries("t")
	q.core.Hide = strings.Replace(q.core.Hide, "@hiddenFrom", "@hidden", 1)
	_, err := sqlstore.New(sqlstore.Dialect{Name: "sqlite", SQL: q.core, Bind: binding()})
	require.ErrorContains(t, err, "@hidden")
}
