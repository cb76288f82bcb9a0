package mysql_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
)

func TestCheckInfrastructure(t *testing.T) {
	t.Parallel()
	dsn, database := testenv.MySQLDatabase(t)
	db := openDB(t, dsn)
	sqlstoretest.ChecksInfrastructure(t, func(ctx context.Context, endpoint string) (*mysql.Store, error) {
		return mysql.Open(ctx, mysql.Config{DSN: dsn, Endpoint: endpoint})
	}, func() int {
		var n int
		require.NoError(t, db.QueryRowContext(context.Background(),
			`SELECT count(*) FROM information_schema.tables WHERE table_schema = ?`, database).Scan(&n))
		return n
	})
}
