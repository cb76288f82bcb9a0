package sqlstoretest

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// TxStore is a SQL store that schedules in the caller's transaction.
type TxStore interface {
	Store
	persistence.Scheduler
	persistence.TxScheduler
	persistence.Inspector
}

// ScheduleTx checks ScheduleTx on store (set up, empty) in transactions begun on db, the
// database the store keeps its table in: a timeout scheduled in a committed transaction is
// stored, one of a rolled-back transaction never is; a keyed replace rolled back leaves the old
// timeout pending; and a taken id or key, even taken by a transaction that commits while this
// one waits, neither fails the caller's transaction nor makes it unusable. It closes store.
func ScheduleTx(t *testing.T, db *sql.DB, store TxStore) {
	t.Helper()
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	due := now.Add(time.Hour)
	timeout := func(id, key string) persistence.Timeout {
		return persistence.Timeout{ID: id, Destination: "orders", Due: due, Key: key, Payload: []byte("of " + id),
			Metadata: map[string]string{"id": id}}
	}
	begin := func() *sql.Tx {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		return tx
	}
	scheduleTx := func(tx *sql.Tx, to persistence.Timeout, policy persistence.KeyPolicy, want persistence.Scheduled) {
		t.Helper()
		got, err := store.ScheduleTx(ctx, tx, to, now, policy)
		require.NoError(t, err, "ScheduleTx %q", to.ID)
		require.Equal(t, want, got, "ScheduleTx %q", to.ID)
	}
	requireGone := func(id string) {
		t.Helper()
		_, err := store.Peek(ctx, id)
		require.ErrorIs(t, err, persistence.ErrNotFound, "Peek %q", id)
	}

	// Committed: stored, with its key, and delivered like any other.
	tx := begin()
	scheduleTx(tx, timeout("committed", "k-commit"), persistence.KeyKeep, persistence.Scheduled{ID: "committed", Outcome: persistence.Created})
	require.NoError(t, tx.Commit())
	got, err := store.Peek(ctx, "committed")
	require.NoError(t, err)
	require.Equal(t, "k-commit", got.Key)
	require.Equal(t, []byte("of committed"), got.Payload)

	// Rolled back: never stored, never claimable.
	tx = begin()
	scheduleTx(tx, timeout("rolled-back", ""), persistence.KeyKeep, persistence.Scheduled{ID: "rolled-back", Outcome: persistence.Created})
	require.NoError(t, tx.Rollback())
	requireGone("rolled-back")

	// A keyed replace rolled back: the old timeout stays, pending and holding its key.
	_, err = store.Schedule(ctx, timeout("old", "k-replace"), now, persistence.KeyReplace)
	require.NoError(t, err)
	tx = begin()
	scheduleTx(tx, timeout("new", "k-replace"), persistence.KeyReplace,
		persistence.Scheduled{ID: "new", Outcome: persistence.Replaced, Replaced: "old"})
	require.NoError(t, tx.Rollback())
	requireGone("new")
	list, err := store.List(ctx, persistence.ListOptions{Key: "k-replace"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "old", list[0].ID, "the old timeout holds the key")

	// A taken id or key leaves the caller's transaction usable: what it does next commits.
	tx = begin()
	scheduleTx(tx, timeout("committed", "k-commit"), persistence.KeyKeep, persistence.Scheduled{ID: "committed", Outcome: persistence.Existed})
	scheduleTx(tx, timeout("dup", "k-commit"), persistence.KeyKeep, persistence.Scheduled{ID: "committed", Outcome: persistence.Duplicate})
	scheduleTx(tx, timeout("after-conflict", ""), persistence.KeyKeep, persistence.Scheduled{ID: "after-conflict", Outcome: persistence.Created})
	require.NoError(t, tx.Commit())
	_, err = store.Peek(ctx, "after-conflict")
	require.NoError(t, err)
	requireGone("dup")

	// A key taken by a transaction that commits while this one inserts: the insert skips it, and
	// the transaction finds the new holder and goes on.
	first := begin()
	scheduleTx(first, timeout("first", "k-race"), persistence.KeyKeep, persistence.Scheduled{ID: "first", Outcome: persistence.Created})
	type result struct {
		got persistence.Scheduled
		err error
		tx  *sql.Tx
	}
	done := make(chan result, 1)
	go func() {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			done <- result{err: err}
			return
		}
		got, err := store.ScheduleTx(ctx, tx, timeout("second", "k-race"), now, persistence.KeyKeep)
		if err == nil {
			_, err = store.ScheduleTx(ctx, tx, timeout("after-race", ""), now, persistence.KeyKeep)
		}
		done <- result{got: got, err: err, tx: tx}
	}()
	time.Sleep(200 * time.Millisecond) // let the second transaction meet the first's key
	require.NoError(t, first.Commit())
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the second transaction still waits a minute after the first committed")
	}
	require.NoError(t, r.err)
	require.Equal(t, persistence.Scheduled{ID: "first", Outcome: persistence.Duplicate}, r.got)
	require.NoError(t, r.tx.Commit())
	_, err = store.Peek(ctx, "after-race")
	require.NoError(t, err)
	requireGone("second")

	ids, err := store.ClaimDue(ctx, due, 100, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"committed", "old", "after-conflict", "first", "after-race"}, ids,
		"what committed, and only that, is delivered")

	_, err = store.ScheduleTx(ctx, nil, timeout("nil-tx", ""), now, persistence.KeyKeep)
	require.ErrorContains(t, err, "tx is nil")
}

// Migrated checks store, whose table was made by an older version with oldID stored in it and
// then set up by this one (oldID due within the hour): the old timeout is there without a key,
// keys work, setting up again changes nothing, claims record their instance and timeouts can be
// parked. It closes store.
func Migrated(t *testing.T, store interface {
	Store
	persistence.Scheduler
}, oldID string) {
	t.Helper()
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	old, err := store.Peek(ctx, oldID)
	require.NoError(t, err, "the timeout stored before the migration")
	require.Empty(t, old.Key)
	to := persistence.Timeout{ID: "keyed", Destination: "orders", Due: now, Key: "k"}
	got, err := store.Schedule(ctx, to, now, persistence.KeyKeep)
	require.NoError(t, err)
	require.Equal(t, persistence.Created, got.Outcome)
	to.ID = "keyed-again"
	got, err = store.Schedule(ctx, to, now, persistence.KeyKeep)
	require.NoError(t, err)
	require.Equal(t, persistence.Scheduled{ID: "keyed", Outcome: persistence.Duplicate}, got, "the key column is unique")
	require.NoError(t, store.SetupInfrastructure(ctx), "set up again")
	if checker, ok := any(store).(persistence.SetupChecker); ok {
		require.NoError(t, checker.CheckInfrastructure(ctx), "the migrated table passes the check")
	}
	claimer, ok := any(store).(persistence.Claimer)
	require.True(t, ok, "%T implements persistence.Claimer", store)
	ids, err := claimer.ClaimDueAs(ctx, "instance-1", now.Add(time.Hour), 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{oldID, "keyed"}, ids)
	n, err := claimer.ReleaseClaimsOf(ctx, "instance-1")
	require.NoError(t, err)
	require.Equal(t, 2, n, "the claiming instance is recorded")
	parker, ok := any(store).(persistence.Parker)
	require.True(t, ok, "%T implements persistence.Parker", store)
	parked, err := parker.Park(ctx, oldID, "reason")
	require.NoError(t, err)
	require.True(t, parked)
	old, err = store.Peek(ctx, oldID)
	require.NoError(t, err)
	require.Equal(t, "reason", old.Parked, "the parking reason is kept")
	ids, err = store.ClaimDue(ctx, now.Add(time.Hour), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"keyed"}, ids, "the parked one is left out")
}

// OldTableChecked checks a store on a table an older version made, before SetupInfrastructure:
// CheckInfrastructure says it is not set up, naming the table, so that the read-only commands
// (which check first) fail with that rather than with an unknown column.
func OldTableChecked(t *testing.T, store persistence.SetupChecker, table string) {
	t.Helper()
	err := store.CheckInfrastructure(t.Context())
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.ErrorContains(t, err, table)
	require.ErrorContains(t, err, "older version")
}
