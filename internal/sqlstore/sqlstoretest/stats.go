package sqlstoretest

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// StatsMatchTable checks that store's Stats equal the same numbers counted from the whole table
// (qualified and quoted) on db, PostgreSQL's placeholders, while nothing changes it.
func StatsMatchTable(t *testing.T, store persistence.Inspector, db *sql.DB, table string) {
	t.Helper()
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	st, err := store.Stats(ctx, now)
	require.NoError(t, err)
	var (
		want             persistence.Stats
		earliest, latest sql.NullTime
	)
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*),
	count(*) FILTER (WHERE due <= $1 AND parked_reason IS NULL),
	count(*) FILTER (WHERE available_at <> due AND available_at > $1 AND parked_reason IS NULL),
	count(*) FILTER (WHERE parked_reason IS NOT NULL), min(due), max(due) FROM `+table, now).
		Scan(&want.Pending, &want.DueNow, &want.Claimed, &want.Parked, &earliest, &latest))
	want.ByDestination = map[string]int{}
	rows, err := db.QueryContext(ctx, `SELECT destination, count(*) FROM `+table+` GROUP BY destination`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var (
			d string
			n int
		)
		require.NoError(t, rows.Scan(&d, &n))
		want.ByDestination[d] = n
	}
	require.NoError(t, rows.Err())
	want.Earliest, want.Latest = earliest.Time.UTC(), latest.Time.UTC()
	require.True(t, want.Earliest.Equal(st.Earliest) && want.Latest.Equal(st.Latest), "Earliest and Latest: %s %s, want %s %s",
		st.Earliest, st.Latest, want.Earliest, want.Latest)
	st.Earliest, st.Latest = want.Earliest, want.Latest
	require.Equal(t, want, st, "Stats as the table counts them")
}
