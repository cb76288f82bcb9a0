package postgres

import (
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// TestCountOwnersExact: CountOwners equals a GROUP BY of the table, for every limit, after
// stores one by one and in batches, removals and cancels by owner; while no fold can run (its
// lock held elsewhere), so that the read adds deltas to the owners' rows, and an owner with no
// delta overtakes owners whose deltas took some away; after concurrent writers beside folds; and
// after a TRUNCATE. A claim of 500 appends no delta.
func TestCountOwnersExact(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, db, _ := openOrders(t)
	deltaRows := func() int {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+store.q.counts.ownerDeltas).Scan(&n))
		return n
	}

	// Owner hot-i has i+1 timeouts; 300 owners have one each, as a saga per owner makes them;
	// 200 have none.
	due := time.Now().Add(-time.Hour)
	var batch []persistence.Timeout
	add := func(id, owner string) {
		batch = append(batch, persistence.Timeout{ID: id, Destination: "d", Owner: owner, Due: due})
		due = due.Add(time.Second)
	}
	for i := range 40 {
		for j := range i + 1 {
			add(fmt.Sprintf("hot-%d-%d", i, j), fmt.Sprintf("hot-%02d", i))
		}
	}
	for i := range 300 {
		add(fmt.Sprintf("saga-%d", i), fmt.Sprintf("saga-%03d", i))
	}
	for i := range 200 {
		add(fmt.Sprintf("none-%d", i), "")
	}
	for _, to := range batch[:50] {
		_, err := store.Store(ctx, to)
		require.NoError(t, err)
	}
	_, err := store.StoreMany(ctx, batch[50:])
	require.NoError(t, err)
	requireOwners(t, store, db)
	_, err = store.Remove(ctx, "hot-39-0")
	require.NoError(t, err)
	_, err = store.CancelByOwner(ctx, "saga-007")
	require.NoError(t, err)
	requireOwners(t, store, db)

	// With the folds' lock held elsewhere, the changes stay deltas: hot-39 and hot-38 lose
	// 20 each, so hot-37, which has no delta, leads, though the folded rows rank it third.
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_lock($1, 1)`, lockSpace(store.q.counts.table))
	require.NoError(t, err)
	var ids []string
	for j := range 20 {
		ids = append(ids, fmt.Sprintf("hot-39-%d", j+1), fmt.Sprintf("hot-38-%d", j))
	}
	_, err = store.RemoveMany(ctx, ids)
	require.NoError(t, err)
	_, err = store.Store(ctx, persistence.Timeout{ID: "late", Destination: "d", Owner: "saga-new", Due: due})
	require.NoError(t, err)
	before := deltaRows()
	require.NotZero(t, before, "the changes wait as deltas")
	claimed, err := store.ClaimDue(ctx, time.Now(), 500, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 500)
	require.Equal(t, before, deltaRows(), "a claim appends no delta")
	got, err := store.CountOwners(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []persistence.OwnerCount{{Owner: "hot-37", Count: 38}}, got.Top)
	requireOwners(t, store, db)
	require.Equal(t, before, deltaRows(), "no fold ran")
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1, 1)`, lockSpace(store.q.counts.table))
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	requireOwners(t, store, db)
	require.Zero(t, deltaRows(), "the read folded the deltas")

	// Writers on the same owners at once, beside reads that fold.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := store.CountOwners(ctx, 5)
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for r := range 15 {
				var ts []persistence.Timeout
				var ids []string
				for k := range 20 {
					id := fmt.Sprintf("w%d-%d-%d", w, r, k)
					ts = append(ts, persistence.Timeout{ID: id, Destination: "d", Owner: fmt.Sprintf("hot-%02d", k%3), Due: time.Now().Add(time.Hour)})
					if k%4 == 0 {
						ids = append(ids, id)
					}
				}
				if _, err := store.StoreMany(ctx, ts); err != nil {
					t.Error(err)
					return
				}
				if _, err := store.RemoveMany(ctx, ids); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	requireOwners(t, store, db)

	_, err = db.ExecContext(ctx, `TRUNCATE `+store.q.table)
	require.NoError(t, err)
	got, err = store.CountOwners(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, persistence.OwnerCounts{Top: []persistence.OwnerCount{}}, got, "TRUNCATE empties the owners")
}

// TestCountOwnersPlanReadsIndexes: with an owner per timeout, as many owners' rows as timeouts,
// CountOwners reads the top owners by the index on counts and the owners of the deltas by the
// key, never the whole table of owners.
func TestCountOwnersPlanReadsIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, db, _ := openOrders(t)
	_, err := db.ExecContext(ctx, `INSERT INTO `+store.q.table+` (id, destination, due, available_at, owner, payload, metadata)
	SELECT 't' || g, 'd', now(), now(), CASE WHEN g % 10 = 0 THEN '' ELSE 'saga-' || g END, '', '' FROM generate_series(1, 50000) AS g`)
	require.NoError(t, err)
	got, err := store.CountOwners(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, 5000, got.NoOwner)
	require.Len(t, got.Top, 3)
	_, err = db.ExecContext(ctx, `ANALYZE `+store.q.counts.owners)
	require.NoError(t, err)
	for _, q := range []struct {
		query, index string
		arg          any
	}{{store.q.counts.topOwners, "owners_n", 13}, {store.q.counts.ownersOf, "owners_pkey", []string{"", "saga-7"}}} {
		plan := planText(t, db, q.query, q.arg)
		require.NotContains(t, plan, "Seq Scan", plan)
		require.Contains(t, plan, q.index, plan)
	}
}

// requireOwners checks CountOwners against a GROUP BY of the table, at several limits.
func requireOwners(t *testing.T, store *Store, db *sql.DB) {
	t.Helper()
	ctx := t.Context()
	for _, limit := range []int{0, 1, 3, 10, 1000} {
		got, err := store.CountOwners(ctx, limit)
		require.NoError(t, err)
		want := persistence.OwnerCounts{Top: []persistence.OwnerCount{}}
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+store.q.table+` WHERE owner = ''`).Scan(&want.NoOwner))
		rows, err := db.QueryContext(ctx, `SELECT owner, count(*) FROM `+store.q.table+` WHERE owner <> ''
	GROUP BY owner ORDER BY count(*) DESC, owner LIMIT $1`, limit)
		require.NoError(t, err)
		for rows.Next() {
			var c persistence.OwnerCount
			require.NoError(t, rows.Scan(&c.Owner, &c.Count))
			want.Top = append(want.Top, c)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Equal(t, want, got, "limit %d", limit)
	}
}
