package sqlserver_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
)

func TestCheckInfrastructure(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	schema := testenv.UniqueName(t, "tm")
	exec(t, dsn, "CREATE SCHEMA "+quote(schema))
	t.Cleanup(func() {
		for _, endpoint := range []string{"order", "orders"} {
			exec(t, dsn, "DROP TABLE IF EXISTS "+quote(schema)+"."+quote(endpoint+".timeouts"))
		}
		exec(t, dsn, "DROP SCHEMA "+quote(schema))
	})
	db := openDB(t, dsn)
	sqlstoretest.ChecksInfrastructure(t, func(ctx context.Context, endpoint string) (*sqlserver.Store, error) {
		return sqlserver.Open(ctx, sqlserver.Config{DSN: dsn, Schema: schema, Endpoint: endpoint})
	}, func() int {
		var n int
		require.NoError(t, db.QueryRowContext(context.Background(),
			`SELECT count(*) FROM sys.tables WHERE schema_id = SCHEMA_ID(@p1)`, schema).Scan(&n))
		return n
	})
}
