package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// batchStore is a store with the optional batch calls.
type batchStore interface {
	persistence.Store
	persistence.BatchStore
}

// testBatch checks the batch calls, for the stores that implement them: StoreMany stores each
// timeout as Store would and reports the ids it inserted, PeekMany reads what Peek reads,
// RemoveMany reports what it deleted, also across many ids and concurrent callers.
func (s suite) testBatch(t *testing.T) {
	store, _ := s.setup(t)
	if _, ok := store.(batchStore); !ok {
		t.Skipf("%T does not implement StoreMany, PeekMany and RemoveMany (persistence.BatchStore)", store)
	}
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"PeekManyAndRemoveMany", s.testPeekManyAndRemoveMany},
		{"StoreMany", s.testStoreMany},
		{"StoreManyKeepsDueAsStoreDoes", s.testStoreManyKeepsDueAsStoreDoes},
		{"ManyIDs", s.testBatchManyIDs},
		{"ConcurrentBatches", s.testConcurrentBatches},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t)
		})
	}
}

func (s suite) batch(t *testing.T) (batchStore, context.Context) {
	store, ctx := s.setup(t)
	return store.(batchStore), ctx
}

func (s suite) testPeekManyAndRemoveMany(t *testing.T) {
	store, ctx := s.batch(t)
	due := base().Add(-time.Minute)
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("t-%d", i)
		ids = append(ids, id)
		mustStore(ctx, t, store, persistence.Timeout{
			ID: id, Destination: "payments", Due: due, Owner: "order-7",
			Payload: []byte{byte(i), 0, 0xff}, Metadata: map[string]string{"n": fmt.Sprint(i)}, FailureCount: i,
		})
	}

	found, err := store.PeekMany(ctx, append([]string{"missing"}, ids[1:4]...))
	require.NoError(t, err)
	slices.SortFunc(found, func(a, b persistence.Timeout) int { return strings.Compare(a.ID, b.ID) })
	require.Len(t, found, 3, "the missing id is left out")
	for j, got := range found {
		i := j + 1
		want, err := store.Peek(ctx, ids[i])
		require.NoError(t, err)
		require.Equal(t, want, got, "PeekMany reads what Peek reads")
		require.Equal(t, []byte{byte(i), 0, 0xff}, got.Payload)
		require.Equal(t, i, got.FailureCount)
		require.True(t, due.Equal(got.Due))
	}
	none, err := store.PeekMany(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, none)

	// A claimed timeout is read and removed like any other.
	claimed, err := store.ClaimDue(ctx, base(), 1, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	removed, err := store.RemoveMany(ctx, []string{ids[0], ids[2], "missing"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{ids[0], ids[2]}, removed, "only what was there")
	removed, err = store.RemoveMany(ctx, []string{ids[0], ids[4]})
	require.NoError(t, err)
	require.Equal(t, []string{ids[4]}, removed, "a second removal finds it gone")
	for _, id := range []string{ids[0], ids[2], ids[4]} {
		_, err := store.Peek(ctx, id)
		require.ErrorIs(t, err, persistence.ErrNotFound)
	}
	left, err := store.PeekMany(ctx, ids)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{ids[1], ids[3]}, idsOf(left))
	none, err = store.PeekMany(ctx, []string{ids[0]})
	require.NoError(t, err)
	require.Empty(t, none, "a removed timeout is not read")
	gone, err := store.RemoveMany(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, gone)
}

func (s suite) testStoreMany(t *testing.T) {
	store, ctx := s.batch(t)
	due := base().Add(time.Hour)
	timeout := func(id string) persistence.Timeout {
		return persistence.Timeout{ID: id, Destination: "payments", Due: due, Owner: "o-" + id,
			Payload: []byte(id), Metadata: map[string]string{"id": id}, FailureCount: 2}
	}
	mustStore(ctx, t, store, timeout("old"))

	inserted, err := store.StoreMany(ctx, []persistence.Timeout{timeout("a"), timeout("old"), timeout("b")})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b"}, inserted, "a stored id is not inserted again")
	for _, id := range []string{"a", "b"} {
		got, err := store.Peek(ctx, id)
		require.NoError(t, err)
		require.Equal(t, timeout(id), got)
	}
	next, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, due.Equal(next), "claimable from its due time")
	claimed, err := store.ClaimDue(ctx, due, 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b", "old"}, claimed)

	again, err := store.StoreMany(ctx, []persistence.Timeout{timeout("b"), timeout("a")})
	require.NoError(t, err)
	require.Empty(t, again, "storing a batch twice inserts nothing the second time")
	got, err := store.Peek(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, timeout("a"), got, "nor changes what is stored")
	empty, err := store.StoreMany(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, empty)

	bare := persistence.Timeout{ID: "bare", Destination: "payments", Due: due}
	inserted, err = store.StoreMany(ctx, []persistence.Timeout{bare})
	require.NoError(t, err)
	require.Equal(t, []string{"bare"}, inserted)
	got, err = store.Peek(ctx, "bare")
	require.NoError(t, err)
	requireSameTimeout(t, bare, got)

	bad := timeout("c")
	bad.Destination = ""
	_, err = store.StoreMany(ctx, []persistence.Timeout{timeout("d"), bad})
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout)
	_, err = store.Peek(ctx, "d")
	require.ErrorIs(t, err, persistence.ErrNotFound, "none stored when one is invalid")
}

// testStoreManyKeepsDueAsStoreDoes: a due time in another zone, with nanoseconds, comes back in
// UTC as from Store (rounded up to the microsecond where the store keeps microseconds), so a
// batch never makes a timeout early.
func (s suite) testStoreManyKeepsDueAsStoreDoes(t *testing.T) {
	store, ctx := s.batch(t)
	zone := time.FixedZone("UTC-03:30", -(3*3600 + 30*60))
	due := base().Add(time.Hour + 1).In(zone) // one nanosecond past a microsecond
	one := timeout("one", due)
	mustStore(ctx, t, store, one)
	many := timeout("many", due)
	inserted, err := store.StoreMany(ctx, []persistence.Timeout{many})
	require.NoError(t, err)
	require.Equal(t, []string{"many"}, inserted)

	want, err := store.Peek(ctx, "one")
	require.NoError(t, err)
	got, err := store.Peek(ctx, "many")
	require.NoError(t, err)
	require.True(t, want.Due.Equal(got.Due), "Store kept %s, StoreMany %s", want.Due, got.Due)
	require.Equal(t, time.UTC, got.Due.Location())
	require.False(t, got.Due.Before(due), "never early: %s", got.Due)
	require.Less(t, got.Due.Sub(due), time.Microsecond, "at most rounded up to the microsecond: %s", got.Due)
}

// testBatchManyIDs uses batches larger than any one statement of a SQL store may take (SQLite's
// IN lists, SQL Server's 2,100 parameters), with some ids not stored.
func (s suite) testBatchManyIDs(t *testing.T) {
	store, ctx := s.batch(t)
	const n = 2600
	due := base().Add(-time.Second)
	var (
		ts  []persistence.Timeout
		ids []string
	)
	for i := range n {
		id := fmt.Sprintf("t-%04d", i)
		ids = append(ids, id)
		ts = append(ts, timeout(id, due))
	}
	inserted, err := store.StoreMany(ctx, ts[:n/2])
	require.NoError(t, err)
	require.ElementsMatch(t, ids[:n/2], inserted)
	inserted, err = store.StoreMany(ctx, ts)
	require.NoError(t, err)
	require.ElementsMatch(t, ids[n/2:], inserted, "the second half only")

	asked := append(slices.Clone(ids), "missing-1", "missing-2")
	found, err := store.PeekMany(ctx, asked)
	require.NoError(t, err)
	require.ElementsMatch(t, ids, idsOf(found))
	for _, got := range found {
		require.Equal(t, []byte("payload of "+got.ID), got.Payload)
	}
	removed, err := store.RemoveMany(ctx, asked)
	require.NoError(t, err)
	require.ElementsMatch(t, ids, removed)
	_, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.False(t, ok, "all removed")
}

// testConcurrentBatches: callers storing and removing overlapping batches at once each get back
// their own share; every id is reported inserted once and removed once.
func (s suite) testConcurrentBatches(t *testing.T) {
	store, ctx := s.batch(t)
	const n, callers = 300, 4
	due := base().Add(time.Hour)
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("c-%03d", i))
	}
	run := func(call func(i int, batch []string) ([]string, error)) []string {
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			all []string
		)
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(c), 7))
				batch := slices.Clone(ids)
				rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
				for start := 0; start < len(batch); start += 50 {
					// Each caller's batches overlap other callers' in another order.
					got, err := call(c, batch[start:min(len(batch), start+100)])
					if err != nil {
						t.Errorf("caller %d: %v", c, err)
						return
					}
					mu.Lock()
					all = append(all, got...)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return all
	}

	inserted := run(func(_ int, batch []string) ([]string, error) {
		ts := make([]persistence.Timeout, len(batch))
		for i, id := range batch {
			ts[i] = timeout(id, due)
		}
		return store.StoreMany(ctx, ts)
	})
	require.Len(t, requireUnique(t, inserted), n, "every id inserted exactly once")
	found, err := store.PeekMany(ctx, ids)
	require.NoError(t, err)
	require.Len(t, found, n)

	removed := run(func(_ int, batch []string) ([]string, error) {
		return store.RemoveMany(ctx, batch)
	})
	require.Len(t, requireUnique(t, removed), n, "every id removed exactly once")
	_, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.False(t, ok, "all removed")
}
