package postgres_test

import (
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

// TestCountsFollowTransactions: the counts Stats reads change with the transactions that change
// the table: a rolled back transaction leaves them as they were, in READ COMMITTED and in
// REPEATABLE READ, while other transactions commit beside it and folds run.
func TestCountsFollowTransactions(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	table := quote(schema) + `."orders.timeouts"`
	now := time.Now()

	const writers, rounds = 4, 40
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			level := sql.LevelReadCommitted
			if w%2 == 1 {
				level = sql.LevelRepeatableRead
			}
			for i := range rounds {
				errs[w] = func() error {
					tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
					if err != nil {
						return err
					}
					defer tx.Rollback() //nolint:errcheck // rolled back on purpose, or committed
					for j := range 3 {
						to := persistence.Timeout{ID: fmt.Sprintf("w%d-%d-%d", w, i, j), Destination: fmt.Sprintf("d%d", j),
							Due: now.Add(time.Duration(j-1) * time.Minute)}
						if _, err := store.ScheduleTx(ctx, tx, to, now, persistence.KeyReplace); err != nil {
							return err
						}
					}
					if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE id = $1`, fmt.Sprintf("w%d-%d-0", w, i-1)); err != nil {
						return err
					}
					if i%3 == 0 {
						return nil // rolled back
					}
					return tx.Commit()
				}()
				if errs[w] != nil {
					return
				}
				if i%10 == 0 {
					if _, err := store.Stats(ctx, time.Now()); err != nil { // folds beside the writers
						errs[w] = err
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
	sqlstoretest.StatsMatchTable(t, store, db, table)

	// Parking and unparking, claims, a batch and a cancel by owner, one after the other.
	ids, err := store.ClaimDue(ctx, now, 5, time.Hour)
	require.NoError(t, err)
	require.NotEmpty(t, ids)
	parked, err := store.Park(ctx, ids[0], "failed")
	require.NoError(t, err)
	require.True(t, parked)
	_, err = store.Park(ctx, ids[0], "failed again")
	require.NoError(t, err)
	sqlstoretest.StatsMatchTable(t, store, db, table)
	requireCount(t, store)
	_, err = store.StoreMany(ctx, []persistence.Timeout{{ID: "o1", Destination: "d9", Owner: "o", Due: now}, {ID: "o2", Destination: "d9", Owner: "o", Due: now}})
	require.NoError(t, err)
	sqlstoretest.StatsMatchTable(t, store, db, table)
	n, err := store.CancelByOwner(ctx, "o")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	unparked, err := store.Unpark(ctx, []string{ids[0]})
	require.NoError(t, err)
	require.Equal(t, 1, unparked)
	sqlstoretest.StatsMatchTable(t, store, db, table)
	requireCount(t, store)
}

// requireCount checks that Count returns Stats' Pending and Parked.
func requireCount(t *testing.T, store *postgres.Store) {
	t.Helper()
	st, err := store.Stats(t.Context(), time.Now())
	require.NoError(t, err)
	pending, parked, err := store.Count(t.Context())
	require.NoError(t, err)
	require.Equal(t, []int{st.Pending, st.Parked}, []int{pending, parked}, "Count as Stats")
}
