package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// ReleaseClaimsOf runs at every manager's start and after a claim whose answer was lost. Without
// an index of its own it read the whole table: at ten million rows, for longer than a call may
// take, and the fetch breaker stopped the service at its start. Its plan must read the
// claimed_by index, whichever instance it names and however the planner guesses how many rows are
// claimed.
func TestReleaseClaimsOfReadsAnIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, db, config := openOrders(t)
	_, err := db.ExecContext(ctx, `INSERT INTO `+store.q.table+` (id, destination, due, available_at, payload, metadata)
	SELECT 't' || g, 'd', d, d, decode(repeat(md5(g::text), 64), 'hex'), '' FROM generate_series(1, 50000) AS g,
	LATERAL (SELECT CASE WHEN g % 100 = 0 THEN now() - g * interval '1 ms' ELSE now() + g * interval '1 min' END AS d) AS due`)
	require.NoError(t, err)
	claimed, err := store.ClaimDueAs(ctx, "a", time.Now(), 100, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 100)
	_, err = db.ExecContext(ctx, `ANALYZE `+store.q.table)
	require.NoError(t, err)

	st := sqlstore.StatementsOf(store.core).ReleaseClaimsOf
	for _, instance := range []string{"a", "b"} {
		text := planText(t, db, st.SQL, st.Args(sqlstore.InstanceParams{Instance: instance})...)
		require.NotContains(t, text, "Seq Scan", "ReleaseClaimsOf(%q) reads the table:\n%s", instance, text)
		require.Contains(t, text, `"orders.timeouts_claimed_by"`, "ReleaseClaimsOf(%q) does not read the claimed_by index:\n%s", instance, text)
	}

	// And it still releases what it names, and nothing else.
	n, err := store.ReleaseClaimsOf(ctx, "b")
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = store.ReleaseClaimsOf(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 100, n)
	st2, err := store.Stats(ctx, time.Now())
	require.NoError(t, err)
	require.Zero(t, st2.Claimed)

	// A table the previous release made has no such index: SetupInfrastructure adds it.
	_, err = db.ExecContext(ctx, `DROP INDEX `+store.q.claimedByIndex)
	require.NoError(t, err)
	upgraded, err := Open(ctx, config)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, upgraded.Close()) })
	require.NoError(t, upgraded.SetupInfrastructure(ctx))
	var indexed bool
	require.NoError(t, db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, store.q.claimedByIndex).Scan(&indexed))
	require.True(t, indexed, "SetupInfrastructure did not add the claimed_by index to a table without it")
}
