// Package sqlstoretest holds what the SQL backends' tests share: opening stores and pools on a
// test server, running the conformance suite on a caller's pool, setting up from many instances
// at once, and checking a store that was never opened.
package sqlstoretest

import (
	"context"
	"database/sql"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

// Store is what every SQL backend's *Store is.
type Store interface {
	persistence.Store
	persistence.Installer
}

// Open opens a store with open and sets up its table; the conformance suite closes it.
func Open[S Store](t testing.TB, open func(ctx context.Context) (S, error)) S {
	t.Helper()
	store, err := open(t.Context())
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(t.Context()))
	return store
}

// DB opens a pool with driver on dsn, closed when t ends.
func DB(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// RunOnCallersDB runs the conformance suite on stores that newStore makes with New on db, the
// caller's pool, which their Close must leave open. With once, the 100,000-timeout load is
// skipped: the backend's TestStore runs it.
func RunOnCallersDB[S Store](t *testing.T, db *sql.DB, once bool, newStore func(t *testing.T) (S, error)) {
	t.Helper()
	storetest.Run(t, func(t *testing.T) persistence.Store {
		if once && strings.HasSuffix(t.Name(), "/HundredThousand") {
			t.Skip("the 100,000-timeout load runs once, in TestStore; this test is about New on a caller's *sql.DB")
		}
		store, err := newStore(t)
		require.NoError(t, err)
		require.NoError(t, store.SetupInfrastructure(t.Context()))
		return store
	})
	require.NoError(t, db.PingContext(t.Context()), "the caller's *sql.DB stays open")
}

// SetupAtOnce opens 8 stores with open and sets them up at the same moment, as instances starting
// together do, then sets up once more: every set-up must succeed.
func SetupAtOnce[S Store](t *testing.T, open func(ctx context.Context) (S, error), why string) {
	t.Helper()
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			store, err := open(ctx)
			if err == nil {
				err = store.SetupInfrastructure(ctx)
				_ = store.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err, why)
	}
	store := Open(t, open)
	require.NoError(t, store.SetupInfrastructure(ctx), "again")
	require.NoError(t, store.Close())
}

// Unopened checks that every method of stores no Open or New made (a zero value, a nil pointer)
// fails with an error that says so, naming the backend, rather than panicking.
func Unopened(t *testing.T, name string, stores ...Store) {
	t.Helper()
	ctx := t.Context()
	now := time.Now()
	for _, store := range stores {
		calls := map[string]func() error{
			"SetupInfrastructure": func() error { return store.SetupInfrastructure(ctx) },
			"Store": func() error {
				_, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: now})
				return err
			},
			"Next":     func() error { _, _, err := store.Next(ctx); return err },
			"ClaimDue": func() error { _, err := store.ClaimDue(ctx, now, 1, time.Minute); return err },
			"Peek":     func() error { _, err := store.Peek(ctx, "a"); return err },
			"Remove":   func() error { _, err := store.Remove(ctx, "a"); return err },
			"IncrementFailureCount": func() error {
				_, err := store.IncrementFailureCount(ctx, "a")
				return err
			},
			"Cancel":        func() error { _, err := store.Cancel(ctx, "a"); return err },
			"CancelByOwner": func() error { _, err := store.CancelByOwner(ctx, "o"); return err },
			"Close":         store.Close,
		}
		if s, ok := store.(persistence.SetupChecker); ok {
			calls["CheckInfrastructure"] = func() error { return s.CheckInfrastructure(ctx) }
		}
		if s, ok := store.(persistence.Inspector); ok {
			calls["Stats"] = func() error { _, err := s.Stats(ctx, now); return err }
			calls["List"] = func() error { _, err := s.List(ctx, persistence.ListOptions{}); return err }
		}
		if s, ok := store.(interface {
			Release(ctx context.Context, ids []string) (int, error)
		}); ok {
			calls["Release"] = func() error { _, err := s.Release(ctx, []string{"a"}); return err }
		}
		if s, ok := store.(persistence.Handover); ok {
			calls["Survey"] = func() error { _, err := s.Survey(ctx, now); return err }
			calls["Hide"] = func() error { _, err := s.Hide(ctx, now, now, 1, persistence.HiddenFrom); return err }
		}
		if s, ok := store.(persistence.Scheduler); ok {
			calls["Schedule"] = func() error {
				_, err := s.Schedule(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: now, Key: "k"}, now, persistence.KeyReplace)
				return err
			}
			calls["Reschedule"] = func() error { _, err := s.Reschedule(ctx, "a", now, now); return err }
		}
		if s, ok := store.(persistence.TxScheduler); ok {
			calls["ScheduleTx"] = func() error {
				_, err := s.ScheduleTx(ctx, &sql.Tx{}, persistence.Timeout{ID: "a", Destination: "d", Due: now}, now, persistence.KeyKeep)
				return err
			}
		}
		if s, ok := store.(persistence.BatchStore); ok {
			calls["StoreMany"] = func() error {
				_, err := s.StoreMany(ctx, []persistence.Timeout{{ID: "a", Destination: "d", Due: now}})
				return err
			}
			calls["PeekMany"] = func() error { _, err := s.PeekMany(ctx, []string{"a"}); return err }
			calls["RemoveMany"] = func() error { _, err := s.RemoveMany(ctx, []string{"a"}); return err }
		}
		if s, ok := store.(persistence.Parker); ok {
			calls["Park"] = func() error { _, err := s.Park(ctx, "a", "reason"); return err }
			calls["Unpark"] = func() error { _, err := s.Unpark(ctx, []string{"a"}); return err }
			calls["DeleteParked"] = func() error { _, err := s.DeleteParked(ctx, []string{"a"}); return err }
		}
		if s, ok := store.(persistence.Claimer); ok {
			calls["HoldInstance"] = func() error { _, err := s.HoldInstance(ctx, "i"); return err }
			calls["ClaimDueAs"] = func() error { _, err := s.ClaimDueAs(ctx, "i", now, 1, time.Minute); return err }
			calls["ReleaseClaimsOf"] = func() error { _, err := s.ReleaseClaimsOf(ctx, "i"); return err }
		}
		for method, call := range calls {
			var err error
			require.NotPanics(t, func() { err = call() }, "%s of a %T that is nil: %t", method, store, isNil(store))
			// The shared calls name no backend; the backend's own (SetupInfrastructure) do.
			require.ErrorContains(t, err, "the store was not opened with", "%s of a %T that is nil: %t", method, store, isNil(store))
		}
	}
}

func isNil(store Store) bool {
	v := reflect.ValueOf(store)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// DueRoundsUp checks that a due time finer than a microsecond is kept rounded up, so the timeout
// is never claimed before it is due. It closes store.
func DueRoundsUp(t *testing.T, store persistence.Store) {
	t.Helper()
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	due := time.Date(2030, 1, 1, 0, 0, 0, 1001, time.UTC)
	_, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: due})
	require.NoError(t, err)
	got, err := store.Peek(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, time.Date(2030, 1, 1, 0, 0, 0, 2000, time.UTC), got.Due)
	ids, err := store.ClaimDue(ctx, due, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids)
	ids, err = store.ClaimDue(ctx, got.Due, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
}

// StoresAndClaims checks that store, on a table with a hostile name, stores a timeout and claims
// it.
func StoresAndClaims(t *testing.T, store persistence.Store) {
	t.Helper()
	ctx := t.Context()
	now := time.Now().Truncate(time.Microsecond)
	inserted, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: now})
	require.NoError(t, err)
	require.True(t, inserted)
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
}

// HoldsAcrossPools checks persistence.Claimer.HoldInstance between stores that open opens, each
// on a pool of its own, as two processes would: a name one holds the other cannot take (an
// error wrapping persistence.ErrInstanceInUse naming it) until it is released, or until the
// holder's store, and its pool, is closed.
func HoldsAcrossPools[S Store](t *testing.T, open func(ctx context.Context) (S, error)) {
	t.Helper()
	ctx := t.Context()
	claimer := func(store S) persistence.Claimer {
		c, ok := any(store).(persistence.Claimer)
		require.True(t, ok, "%T implements persistence.Claimer", store)
		return c
	}
	a, b := Open(t, open), Open(t, open)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	release, err := claimer(a).HoldInstance(ctx, "orders-1")
	require.NoError(t, err)
	_, err = claimer(b).HoldInstance(ctx, "orders-1")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse, "held by the other pool")
	require.ErrorContains(t, err, `"orders-1"`)
	releaseB, err := claimer(b).HoldInstance(ctx, "orders-2")
	require.NoError(t, err, "another name")
	_, err = claimer(a).HoldInstance(ctx, "orders-2")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse)
	require.NoError(t, release())
	again, err := claimer(b).HoldInstance(ctx, "orders-1")
	require.NoError(t, err, "free once released")
	require.NoError(t, again())
	require.NoError(t, releaseB())

	// The holder's store is closed, and its pool with it, without releasing: the name is free.
	_, err = claimer(a).HoldInstance(ctx, "orders-3")
	require.NoError(t, err)
	_, err = claimer(b).HoldInstance(ctx, "orders-3")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse)
	require.NoError(t, a.Close())
	last, err := claimer(b).HoldInstance(ctx, "orders-3")
	require.NoError(t, err, "free once the holding pool is closed")
	require.NoError(t, last())
}
