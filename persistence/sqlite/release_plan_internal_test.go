package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// ReleaseClaimsOf runs at every manager's start and after a claim whose answer was lost. Without
// an index of its own it read the whole file. Its plan must search the claimed_by index, and
// SetupInfrastructure adds that index to a file the previous release made.
func TestReleaseClaimsOfReadsAnIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	store, err := Open(ctx, Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(ctx))
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	for i := range 200 {
		_, err := store.Store(ctx, persistence.Timeout{ID: fmt.Sprintf("t%d", i), Destination: "d",
			Due: time.Now().Add(-time.Minute), Payload: []byte("x")})
		require.NoError(t, err)
	}
	claimed, err := store.ClaimDueAs(ctx, "a", time.Now(), 50, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 50)

	plan := func() string {
		st := sqlstore.StatementsOf(store.core).ReleaseClaimsOf
		return queryPlan(t, store, st.SQL, st.Args(sqlstore.InstanceParams{Instance: "a"})...)
	}
	text := plan()
	require.Contains(t, text, `USING INDEX orders.timeouts_claimed_by `, "ReleaseClaimsOf does not search the claimed_by index:\n%s", text)
	n, err := store.ReleaseClaimsOf(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 50, n)

	// A file the previous release made has the column but not the index.
	db, err := sql.Open("sqlite", fileURI(path)+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	indexed := func() bool {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'orders.timeouts_claimed_by'`).Scan(&n))
		return n == 1
	}
	_, err = db.ExecContext(ctx, `DROP INDEX "orders.timeouts_claimed_by"`)
	require.NoError(t, err)
	require.False(t, indexed())
	require.NoError(t, store.SetupInfrastructure(ctx))
	require.True(t, indexed(), "SetupInfrastructure did not add the claimed_by index")
}
