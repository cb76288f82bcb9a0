package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

func TestCheckInfrastructure(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	count := func(query string, args ...any) int {
		var n int
		require.NoError(t, db.QueryRowContext(context.Background(), query, args...).Scan(&n))
		return n
	}
	sqlstoretest.ChecksInfrastructure(t, func(ctx context.Context, endpoint string) (*postgres.Store, error) {
		return postgres.Open(ctx, postgres.Config{DSN: dsn, Schema: schema, Endpoint: endpoint})
	}, func() int { // the counts Stats reads are the table's own
		return count(`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename NOT LIKE '%\_counts'
	AND tablename NOT LIKE '%\_dues' AND tablename NOT LIKE '%\_owners' AND tablename NOT LIKE '%\_owner\_deltas'`, schema)
	})

	t.Run("missing schema", func(t *testing.T) {
		missing := schema + "_missing"
		store, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Schema: missing, Endpoint: "orders"})
		require.NoError(t, err)
		defer store.Close()
		err = store.CheckInfrastructure(t.Context())
		require.ErrorIs(t, err, persistence.ErrNotSetUp)
		require.ErrorContains(t, err, `table "`+missing+`"."orders.timeouts" does not exist`)
		require.Zero(t, count(`SELECT count(*) FROM pg_namespace WHERE nspname = $1`, missing), "no schema was created")
	})
}
