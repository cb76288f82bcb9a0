package postgres

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// openOrders opens and sets up the store of endpoint "orders" in a schema of the test's own, closed
// when the test ends, and returns it with its pool and its config.
func openOrders(t *testing.T) (*Store, *sql.DB, Config) {
	t.Helper()
	dsn, schema := testenv.PostgresSchema(t)
	config := Config{DSN: dsn, Schema: schema, Endpoint: "orders"}
	store, err := Open(t.Context(), config)
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(t.Context()))
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	return store, sqlstore.DB(store.core), config
}

// querier is a pool, a connection or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// explain returns the lines of the plan of query with args, without running it.
func explain(t *testing.T, db querier, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `EXPLAIN `+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	return plan
}

// planText is explain's lines as one text, for messages and Contains.
func planText(t *testing.T, db querier, query string, args ...any) string {
	t.Helper()
	return strings.Join(explain(t, db, query, args...), "\n")
}
