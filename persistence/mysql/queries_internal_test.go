package mysql

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStatementsCompile: every statement of the store, the claim's and the Hide's own included,
// compiles for MariaDB, with a plain name and with one that holds an @, quotes and comment marks,
// so that a parameter misspelt in the SQL fails here rather than on a server.
func TestStatementsCompile(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"orders.timeouts", "t`@x' -- \" /*"} {
		require.NoError(t, validateTable(table))
		_, err := newStore(nil, false, table)
		require.NoError(t, err, table)
	}
	q := newQueries("t")
	q.hideSelect = strings.Replace(q.hideSelect, "@mark", "@mrk", 1)
	_, err := q.compile()
	require.ErrorContains(t, err, "@mrk")
}
