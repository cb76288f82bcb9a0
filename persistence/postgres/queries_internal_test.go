package postgres

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// TestStatementsCompile: every statement of the store compiles for PostgreSQL, with plain names
// and with names that hold an @, quotes and comment marks, so that a parameter misspelt in the SQL
// fails here rather than on a server.
func TestStatementsCompile(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{Endpoint: "orders"}, {Schema: `s"@x'`, Table: `t -- @id /* "`}} {
		c.setDefaults()
		require.NoError(t, c.Validate())
		_, err := newStore(nil, false, c)
		require.NoError(t, err, "%+v", c)
	}
	q := newQueries("public", "t")
	q.core.Claim = strings.Replace(q.core.Claim, "@until", "@untill", 1)
	d, err := q.dialect(nil, false)
	require.NoError(t, err)
	_, err = sqlstore.New(d)
	require.ErrorContains(t, err, "@untill")
	q = newQueries("public", "t")
	q.storeMany = strings.Replace(q.storeMany, "@owners", "@owner", 1)
	_, err = q.dialect(nil, false)
	require.ErrorContains(t, err, "@owner")
}
