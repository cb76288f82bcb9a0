package mysql

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// ReleaseClaimsOf runs at every manager's start and after a claim whose answer was lost. Without
// an index of its own it read the whole table, for longer than a call may take once the table
// holds millions, and the fetch breaker stopped the service at its start. Its plan must look the
// instance up in the claimed_by index, and SetupInfrastructure adds that index to a table the
// previous release made.
func TestReleaseClaimsOfReadsAnIndex(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	ctx := t.Context()
	store, err := Open(ctx, Config{DSN: dsn, Endpoint: "orders"})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(ctx))
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	_, err = db.ExecContext(ctx, "INSERT INTO `orders.timeouts` (id, destination, due, available_at, owner, payload, metadata)\n"+
		"SELECT CONCAT('t', seq), 'd', d, d, '', REPEAT('x', 512), '' FROM (SELECT seq, CASE WHEN seq % 100 = 0\n"+
		"THEN UTC_TIMESTAMP(6) - INTERVAL seq SECOND ELSE UTC_TIMESTAMP(6) + INTERVAL seq MINUTE END AS d\n"+
		"FROM seq_1_to_20000) AS g")
	require.NoError(t, err)
	claimed, err := store.ClaimDueAs(ctx, "a", time.Now(), 100, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 100)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE `orders.timeouts`")
	require.NoError(t, err)

	st := sqlstore.StatementsOf(store.core).ReleaseClaimsOf
	for _, instance := range []string{"a", "b"} {
		// EXPLAIN alone: the plan, without running the UPDATE.
		rows, err := db.QueryContext(ctx, "EXPLAIN "+st.SQL, st.Args(sqlstore.InstanceParams{Instance: instance})...)
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		var plans []map[string]string
		for rows.Next() {
			values := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range values {
				ptrs[i] = &values[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			plan := map[string]string{}
			for i, c := range cols {
				plan[c] = values[i].String
			}
			plans = append(plans, plan)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Len(t, plans, 1, "%v", plans)
		require.Equal(t, "claimed_by", plans[0]["key"], "ReleaseClaimsOf(%q) does not read the claimed_by index: %v", instance, plans[0])
		require.NotEqual(t, "ALL", plans[0]["type"], "ReleaseClaimsOf(%q) reads the table: %v", instance, plans[0])
	}
	n, err := store.ReleaseClaimsOf(ctx, "b")
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = store.ReleaseClaimsOf(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 100, n)

	// A table the previous release made has every column but not the index.
	_, err = db.ExecContext(ctx, "ALTER TABLE `orders.timeouts` DROP INDEX claimed_by")
	require.NoError(t, err)
	upgraded, err := Open(ctx, Config{DSN: dsn, Endpoint: "orders"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, upgraded.Close()) })
	require.NoError(t, upgraded.CheckInfrastructure(ctx), "the previous release's table is usable as it is")
	require.NoError(t, upgraded.SetupInfrastructure(ctx))
	var indexes int
	require.NoError(t, db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND INDEX_NAME = 'claimed_by'",
		"'orders.timeouts'")).Scan(&indexes))
	require.Equal(t, 1, indexes, "SetupInfrastructure did not add the claimed_by index")
}
