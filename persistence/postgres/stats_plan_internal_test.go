package postgres

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStatsPlanReadsIndexes: on a table of 1 KB rows whose statistics say that nearly every row
// is due later (as in a store in use), where the planner left alone reads the whole table for
// Claimed, the plan of Stats' statement reads the timeouts table through its indexes alone,
// with no sequential or bitmap scan of it, so that it reads as many entries as it counts; the
// counts and the dues are small and read whole.
func TestStatsPlanReadsIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, db, _ := openOrders(t)
	for _, stmt := range []string{
		`INSERT INTO ` + store.q.table + ` (id, destination, due, available_at, payload, metadata)
	SELECT 't' || g, 'd', d, d, decode(repeat(md5(g::text), 64), 'hex'), '' FROM generate_series(1, 50000) AS g,
	LATERAL (SELECT CASE WHEN g % 100 = 0 THEN now() - g * interval '1 ms' ELSE now() + g * interval '1 min' END AS d) AS due`,
		`ANALYZE ` + store.q.table,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err)
	}
	_, err := store.ClaimDue(ctx, time.Now(), 100, time.Hour)
	require.NoError(t, err)

	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // read only
	_, err = tx.ExecContext(ctx, indexesOnly)
	require.NoError(t, err)
	now := time.Now()
	plan := explain(t, tx, store.q.counts.stats, now, now.UTC().Truncate(time.Minute))
	text := strings.Join(plan, "\n")
	for _, line := range plan {
		if strings.Contains(line, "Seq Scan") || strings.Contains(line, "Bitmap") {
			require.True(t, strings.Contains(line, "timeouts_counts") || strings.Contains(line, "timeouts_dues"),
				"a scan of the timeouts table that is not an index scan:\n%s", text)
		}
	}
	require.Contains(t, text, `Scan using "orders.timeouts_claimed"`, "Claimed from the claimed index:\n%s", text)
}
