// Package storetest is the conformance suite every persistence.Store backend runs, so that the
// memory, SQLite, PostgreSQL, MariaDB and SQL Server stores behave alike wherever timeoutmill
// relies on them: idempotent Store, claims that never hand one id to two pollers while a lease
// runs, byte-exact payloads and headers, microsecond due times, cancel; Stats and List for stores
// that implement persistence.Inspector, Hide, Release and Survey for persistence.Handover, and
// StoreMany, PeekMany and RemoveMany for stores with the batch calls of persistence.BatchStore,
// parked timeouts for persistence.Parker, instance-tagged claims and held instance names for
// persistence.Claimer, and the store's own clock for persistence.Clocked.
//
// A backend's test calls Run with a constructor that returns an empty store of its own:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) persistence.Store {
//			return memory.New()
//		})
//	}
//
// Subtests run in parallel, so newStore must give each one its own table, schema or file. The
// suite closes every store it was given. The 100,000-timeout subtest is skipped under -short.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Run runs the conformance suite against a backend. newStore is called once per subtest and must
// return an empty store of its own (a fresh table, schema or file); the suite closes it.
func Run(t *testing.T, newStore func(t *testing.T) persistence.Store) {
	t.Helper()
	s := suite{newStore: newStore}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"EmptyStore", s.testEmptyStore},
		{"RoundTrip", s.testRoundTrip},
		{"DuePrecisionAndUTC", s.testDuePrecisionAndUTC},
		{"PastDueClaimableAtOnce", s.testPastDueClaimableAtOnce},
		{"NothingClaimableBeforeDue", s.testNothingClaimableBeforeDue},
		{"ClaimDueLimitAndOrder", s.testClaimDueLimitAndOrder},
		{"LeaseExcludesOtherClaimers", s.testLeaseExcludesOtherClaimers},
		{"Next", s.testNext},
		{"MissingID", s.testMissingID},
		{"IncrementFailureCount", s.testIncrementFailureCount},
		{"IdempotentStore", s.testIdempotentStore},
		{"StoreAgainAfterRemove", s.testStoreAgainAfterRemove},
		{"InvalidTimeout", s.testInvalidTimeout},
		{"Remove", s.testRemove},
		{"Cancel", s.testCancel},
		{"CancelByOwner", s.testCancelByOwner},
		{"ConcurrentClaimers", s.testConcurrentClaimers},
		{"HundredThousand", s.testHundredThousand},
		{"Inspector", s.testInspector},
		{"Handover", s.testHandover},
		{"Batch", s.testBatch},
		{"Schedule", s.testSchedule},
		{"ScheduleKeys", s.testScheduleKeys},
		{"ScheduleKeyRace", s.testScheduleKeyRace},
		{"Reschedule", s.testReschedule},
		{"ListFilters", s.testListFilters},
		{"StatsAtNow", s.testStatsAtNow},
		{"StatsExact", s.testStatsExact},
		{"CountDue", s.testCountDue},
		{"CountOwners", s.testCountOwners},
		{"CancelledContext", s.testCancelledContext},
		{"Parker", s.testParker},
		{"Claimer", s.testClaimer},
		{"Clocked", s.testClocked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t)
		})
	}
}

type suite struct {
	newStore func(t *testing.T) persistence.Store
}

// setup returns a fresh store, closed when the test ends, and the test's context.
func (s suite) setup(t *testing.T) (persistence.Store, context.Context) {
	t.Helper()
	store := s.newStore(t)
	require.NotNil(t, store, "newStore returned nil")
	t.Cleanup(func() {
		require.NoError(t, store.Close(), "Close")
	})
	return store, t.Context()
}

// base is a reference time at microsecond precision, so that every time the suite derives from
// it is one a store must keep exactly.
func base() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

// timeout returns a small valid timeout.
func timeout(id string, due time.Time) persistence.Timeout {
	return persistence.Timeout{
		ID:          id,
		Destination: "orders",
		Due:         due,
		Payload:     []byte("payload of " + id),
		Metadata:    map[string]string{"_watermill_message_uuid": id},
	}
}

func mustStore(ctx context.Context, t *testing.T, store persistence.Store, ts ...persistence.Timeout) {
	t.Helper()
	for _, to := range ts {
		inserted, err := store.Store(ctx, to)
		require.NoError(t, err, "Store %q", to.ID)
		require.True(t, inserted, "Store %q: inserted", to.ID)
	}
}

// storeConcurrently stores n timeouts made by build(i) from workers goroutines, so that backends
// that commit once per Store, each commit a wait for the server's disk, fill up in seconds.
func storeConcurrently(ctx context.Context, t *testing.T, store persistence.Store, n, workers int, build func(i int) persistence.Timeout) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				to := build(i)
				inserted, err := store.Store(ctx, to)
				if err == nil && !inserted {
					err = fmt.Errorf("Store %q: inserted is false for a new id", to.ID)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("Store %q: %w", to.ID, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	require.NoError(t, firstErr)
}

// claimAll claims until a claim comes back empty and returns every id claimed, in claim order.
func claimAll(ctx context.Context, t *testing.T, store persistence.Store, now time.Time, batch int) []string {
	t.Helper()
	var all []string
	for {
		ids, err := store.ClaimDue(ctx, now, batch, time.Hour)
		require.NoError(t, err, "ClaimDue")
		require.LessOrEqual(t, len(ids), batch, "ClaimDue returned more than limit")
		if len(ids) == 0 {
			return all
		}
		all = append(all, ids...)
	}
}

// requireUnique fails when ids holds an id twice, and returns the set of ids.
func requireUnique(t *testing.T, ids []string) map[string]struct{} {
	t.Helper()
	seen := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		_, dup := seen[id]
		require.False(t, dup, "id %q returned twice", id)
		seen[id] = struct{}{}
	}
	return seen
}

// requireSameTimeout compares what a store gave back with what it was given: payload and
// metadata byte for byte (nil and empty alike), due time to the microsecond.
func requireSameTimeout(t *testing.T, want, got persistence.Timeout) {
	t.Helper()
	require.Equal(t, want.ID, got.ID, "ID")
	require.Equal(t, want.Destination, got.Destination, "Destination")
	require.Equal(t, want.Owner, got.Owner, "Owner")
	require.True(t, want.Due.Equal(got.Due), "Due: want %s, got %s", want.Due, got.Due)
	require.Equal(t, time.UTC, got.Due.Location(), "Due must come back in UTC")
	require.True(t, bytes.Equal(want.Payload, got.Payload),
		"Payload differs: want %d bytes, got %d bytes", len(want.Payload), len(got.Payload))
	if len(want.Metadata) == 0 {
		require.Empty(t, got.Metadata, "Metadata")
	} else {
		require.Equal(t, want.Metadata, got.Metadata, "Metadata")
	}
}
