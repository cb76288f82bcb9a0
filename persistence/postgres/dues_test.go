package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

// TestDueNowAcrossMinutes: Stats' DueNow, which sums the minutes before now's from the dues
// table, equals a count of the table at many nows (on minute bounds, just after and just before
// them, in and out of the timeouts' minutes) after every kind of change: stores one by one and
// in batches, removals, claims, parks, replays, reschedules to an earlier, a later and a past
// minute, concurrent writers beside folds, and a TRUNCATE. A claim of 500 adds no row to the
// dues table.
func TestDueNowAcrossMinutes(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	table := quote(schema) + `."orders.timeouts"`
	dues := quote(schema) + `."orders.timeouts_dues"`

	base := time.Now().UTC().Truncate(time.Minute)
	// Timeouts 30 minutes either side of base, every 7 seconds and a few microseconds off.
	var batch []persistence.Timeout
	for i := range 520 {
		due := base.Add(time.Duration(i-260)*7*time.Second + time.Duration(i%3)*time.Microsecond)
		to := persistence.Timeout{ID: fmt.Sprintf("t%03d", i), Destination: fmt.Sprintf("d%d", i%4), Due: due}
		if i%2 == 0 {
			batch = append(batch, to)
			continue
		}
		_, err := store.Store(ctx, to)
		require.NoError(t, err)
	}
	// Exactly on minute bounds too.
	for i := range 5 {
		batch = append(batch, persistence.Timeout{ID: fmt.Sprintf("m%d", i), Destination: "d0", Due: base.Add(time.Duration(i-2) * time.Minute)})
	}
	_, err := store.StoreMany(ctx, batch)
	require.NoError(t, err)
	requireDueNow(t, store, db, table, base)

	// A claim of 500, at a now past every due time, changes no due time, so no dues.
	var before int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+dues).Scan(&before))
	claimed, err := store.ClaimDue(ctx, base.Add(time.Hour), 500, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 500)
	var after int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+dues).Scan(&after))
	require.Equal(t, before, after, "a claim adds no row to the dues")
	requireDueNow(t, store, db, table, base)
	_, err = store.Release(ctx, claimed[:100])
	require.NoError(t, err)

	// Removals, one and many.
	_, err = store.Remove(ctx, "t001")
	require.NoError(t, err)
	_, err = store.RemoveMany(ctx, []string{"t002", "t003", "t100", "t400", "m2"})
	require.NoError(t, err)
	requireDueNow(t, store, db, table, base)

	// Parks, in past and future minutes, and replays of some.
	for _, id := range []string{"t010", "t011", "t300", "t301", "m1", "t261"} {
		ok, err := store.Park(ctx, id, "failed")
		require.NoError(t, err)
		require.True(t, ok, id)
	}
	requireDueNow(t, store, db, table, base)
	n, err := store.Unpark(ctx, []string{"t010", "t300", "m1"})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	requireDueNow(t, store, db, table, base)

	// Reschedules: later, earlier, into the past (clamped to now), within a minute, and of a
	// parked timeout (refused, nothing moves).
	for _, r := range []struct {
		id  string
		due time.Time
	}{
		{"t020", base.Add(45 * time.Minute)},
		{"t500", base.Add(-20*time.Minute + 3*time.Second)},
		{"t501", base.Add(-2 * time.Hour)},
		{"t260", base.Add(59 * time.Second)},
		{"t011", base.Add(time.Minute)},
	} {
		_, err := store.Reschedule(ctx, r.id, r.due, base.Add(-time.Hour))
		require.NoError(t, err, r.id)
	}
	requireDueNow(t, store, db, table, base)

	// Writers of every kind at once, while Stats folds.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := range 30 {
				id := fmt.Sprintf("w%d-%d", w, i)
				due := base.Add(time.Duration((w*30+i)%90-45) * 41 * time.Second)
				steps := []func() error{
					func() error {
						_, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "dw", Due: due})
						return err
					},
					func() error {
						_, err := store.Reschedule(ctx, id, due.Add(time.Duration(i-15)*time.Minute), base.Add(-time.Hour))
						return err
					},
					func() error {
						if i%3 != 0 {
							return nil
						}
						_, err := store.Park(ctx, id, "failed")
						return err
					},
					func() error {
						if i%6 != 0 {
							return nil
						}
						_, err := store.Unpark(ctx, []string{id})
						return err
					},
					func() error {
						if i%5 != 0 {
							return nil
						}
						_, err := store.Remove(ctx, id)
						return err
					},
					func() error {
						_, err := store.Stats(ctx, base)
						return err
					},
				}
				for _, step := range steps {
					if errs[w] = step(); errs[w] != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	requireDueNow(t, store, db, table, base)
	sqlstoretest.StatsMatchTable(t, store, db, table)

	// After a fold with no writers, every minute's dues sum to its timeouts that are not
	// parked, no row is left unfolded, none is 0 and no minute has two: the table holds one row
	// per minute that has timeouts due (folds take turns, each reading what the last one made).
	_, err = store.Stats(ctx, base)
	require.NoError(t, err)
	var unfolded, empty, twice, wrong int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE NOT folded), count(*) FILTER (WHERE n = 0),
	count(*) - count(DISTINCT bucket) FROM `+dues).Scan(&unfolded, &empty, &twice))
	require.Equal(t, []int{0, 0, 0}, []int{unfolded, empty, twice}, "rows unfolded, rows of 0 and minutes of two rows in the dues")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT bucket, sum(n) AS n FROM `+dues+` GROUP BY bucket) AS d
	FULL JOIN (SELECT date_trunc('minute', due, 'UTC') AS bucket, count(*) AS n FROM `+table+` WHERE parked_reason IS NULL GROUP BY 1) AS t
	USING (bucket) WHERE d.n IS DISTINCT FROM t.n`).Scan(&wrong))
	require.Zero(t, wrong, "minutes whose dues differ from the table's")

	_, err = db.ExecContext(ctx, `TRUNCATE `+table)
	require.NoError(t, err)
	requireDueNow(t, store, db, table, base)
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+dues).Scan(&rows))
	require.Zero(t, rows, "TRUNCATE empties the dues")
}

// TestDuesOnPreviousRelease: a table set up by the previous release, which kept the counts but
// not the dues nor the owners, in use by that release's instances, gets them from
// SetupInfrastructure, starting from what it holds, and DueNow and CountOwners are exact from then
// on.
func TestDuesOnPreviousRelease(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	config := postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"}
	table := quote(schema) + `."orders.timeouts"`
	counts := quote(schema) + `."orders.timeouts_counts"`
	// What the previous release set up: this release's set-up without the due trigger and the
	// dues, and the previous trigger function, which knows nothing of them.
	first := open(t, config)
	require.NoError(t, first.Close())
	for _, stmt := range []string{
		`DROP TRIGGER timeoutmill_count_due ON ` + table,
		`DROP TABLE ` + quote(schema) + `."orders.timeouts_dues"`,
		`DROP TABLE ` + quote(schema) + `."orders.timeouts_owners"`,
		`DROP TABLE ` + quote(schema) + `."orders.timeouts_owner_deltas"`,
		`CREATE OR REPLACE FUNCTION ` + quote(schema) + `."orders.timeouts_count"() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $count$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO ` + counts + ` (destination, pending, parked)
		SELECT destination, count(*), count(parked_reason) FROM changed GROUP BY destination;
	ELSIF TG_OP = 'DELETE' THEN
		INSERT INTO ` + counts + ` (destination, pending, parked)
		SELECT destination, -count(*), -count(parked_reason) FROM changed GROUP BY destination;
	ELSIF TG_OP = 'UPDATE' THEN
		INSERT INTO ` + counts + ` (destination, pending, parked)
		VALUES (NEW.destination, 0, CASE WHEN NEW.parked_reason IS NULL THEN -1 ELSE 1 END);
	ELSE
		DELETE FROM ` + counts + `;
	END IF;
	RETURN NULL;
END
$count$`,
		`INSERT INTO ` + table + ` (id, destination, due, available_at, owner, payload, metadata)
	SELECT 'old' || g, 'd' || (g % 3), now() - interval '1 hour' + g * interval '1 second', now() - interval '1 hour' + g * interval '1 second',
		CASE WHEN g % 4 = 0 THEN '' ELSE 'o' || (g % 11) END, '', ''
	FROM generate_series(1, 7200) AS g`,
		`UPDATE ` + table + ` SET parked_reason = 'failed', available_at = '9999-12-31 23:59:59.999999+00' WHERE id IN ('old1', 'old2', 'old7000')`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	before, err := postgres.Open(ctx, config)
	require.NoError(t, err)
	require.ErrorIs(t, before.CheckInfrastructure(ctx), persistence.ErrNotSetUp, "no dues yet")
	require.NoError(t, before.Close())
	sqlstoretest.SetupAtOnce(t, func(ctx context.Context) (*postgres.Store, error) { return postgres.Open(ctx, config) },
		"instances adding the dues at once")
	store := open(t, config)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	now := time.Now().UTC()
	requireDueNow(t, store, db, table, now.Truncate(time.Minute))
	sqlstoretest.StatsMatchTable(t, store, db, table)
	requireOwnersMatchTable(t, store, db, table)

	for _, stmt := range []string{
		`DELETE FROM ` + table + ` WHERE id IN ('old3', 'old4', 'old1')`,
		`INSERT INTO ` + table + ` (id, destination, due, available_at, owner, payload, metadata) VALUES ('new', 'd9', now(), now(), 'o5', '', '')`,
		`UPDATE ` + table + ` SET parked_reason = NULL, available_at = due WHERE id = 'old2'`,
		`UPDATE ` + table + ` SET due = due + interval '3 hours', available_at = due + interval '3 hours' WHERE id = 'old5'`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	requireDueNow(t, store, db, table, now.Truncate(time.Minute))
	sqlstoretest.StatsMatchTable(t, store, db, table)
	requireOwnersMatchTable(t, store, db, table)
}

// TestOwnersOnTableWithDues: a table set up with the dues but before the owners' tables gets
// them from SetupInfrastructure, which starts every count again from the table.
func TestOwnersOnTableWithDues(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	config := postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"}
	table := quote(schema) + `."orders.timeouts"`
	first := open(t, config)
	for i := range 30 {
		_, err := first.Store(ctx, persistence.Timeout{ID: fmt.Sprintf("t%d", i), Destination: "d", Owner: fmt.Sprintf("o%d", i%4), Due: time.Now()})
		require.NoError(t, err)
	}
	require.NoError(t, first.Close())
	for _, stmt := range []string{
		`DROP TABLE ` + quote(schema) + `."orders.timeouts_owners"`,
		`DROP TABLE ` + quote(schema) + `."orders.timeouts_owner_deltas"`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	before, err := postgres.Open(ctx, config)
	require.NoError(t, err)
	require.ErrorIs(t, before.CheckInfrastructure(ctx), persistence.ErrNotSetUp, "no owners yet")
	require.NoError(t, before.Close())
	store := open(t, config)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	requireOwnersMatchTable(t, store, db, table)
	sqlstoretest.StatsMatchTable(t, store, db, table)
}

// requireOwnersMatchTable checks CountOwners against a GROUP BY of table.
func requireOwnersMatchTable(t *testing.T, store *postgres.Store, db *sql.DB, table string) {
	t.Helper()
	ctx := t.Context()
	got, err := store.CountOwners(ctx, 100)
	require.NoError(t, err)
	want := persistence.OwnerCounts{Top: []persistence.OwnerCount{}}
	rows, err := db.QueryContext(ctx, `SELECT owner, count(*) FROM `+table+` GROUP BY owner ORDER BY count(*) DESC, owner`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var c persistence.OwnerCount
		require.NoError(t, rows.Scan(&c.Owner, &c.Count))
		if c.Owner == "" {
			want.NoOwner = c.Count
		} else {
			want.Top = append(want.Top, c)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got)
}

// requireDueNow checks Stats' DueNow against a count of the table, at nows around the minutes
// from 40 minutes before base to 50 after: on each bound, a microsecond either side, and within.
func requireDueNow(t *testing.T, store *postgres.Store, db *sql.DB, table string, base time.Time) {
	t.Helper()
	ctx := t.Context()
	for m := -40; m <= 50; m += 3 {
		bound := base.Add(time.Duration(m) * time.Minute)
		for _, now := range []time.Time{bound.Add(-time.Microsecond), bound, bound.Add(time.Microsecond), bound.Add(29 * time.Second)} {
			st, err := store.Stats(ctx, now)
			require.NoError(t, err)
			var want int
			require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE due <= $1 AND parked_reason IS NULL`, now).
				Scan(&want))
			require.Equal(t, want, st.DueNow, "DueNow at %s", now)
		}
	}
}
