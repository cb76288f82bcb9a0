package mysql_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
)

// TestOpenOpensThePoolWhole: Open starts MaxOpenConns connections, so that the first burst of due
// timeouts finds them rather than waiting while the server starts each one. The server counts
// them: the test's database is its own, and only the store connects to it by default.
func TestOpenOpensThePoolWhole(t *testing.T) {
	t.Parallel()
	dsn, database := testenv.MySQLDatabase(t)
	open(t, mysql.Config{DSN: dsn, Endpoint: "warm", MaxOpenConns: 4})
	var n int
	require.NoError(t, openDB(t, dsn).QueryRowContext(t.Context(),
		`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()`, database).Scan(&n))
	require.Equal(t, 4, n, "the store's connections to its database")
}
