package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// scheduler returns the store as a persistence.Scheduler, or skips the test.
func scheduler(t *testing.T, store persistence.Store) persistence.Scheduler {
	t.Helper()
	sch, ok := store.(persistence.Scheduler)
	if !ok {
		t.Skipf("%T does not implement persistence.Scheduler", store)
	}
	return sch
}

func keyed(id, key string, due time.Time) persistence.Timeout {
	to := timeout(id, due)
	to.Key = key
	return to
}

func mustSchedule(ctx context.Context, t *testing.T, sch persistence.Scheduler, to persistence.Timeout, now time.Time,
	policy persistence.KeyPolicy, want persistence.Scheduled) {
	t.Helper()
	got, err := sch.Schedule(ctx, to, now, policy)
	require.NoError(t, err, "Schedule %q", to.ID)
	require.Equal(t, want, got, "Schedule %q (key %q, %s)", to.ID, to.Key, policy)
}

// testSchedule: Schedule stores as Store does, is idempotent by id, keeps the key, and Store and
// StoreMany refuse keyed timeouts rather than store them without resolving their key.
func (s suite) testSchedule(t *testing.T) {
	store, ctx := s.setup(t)
	sch := scheduler(t, store)
	now := base()

	plain := timeout("plain", now.Add(time.Minute))
	mustSchedule(ctx, t, sch, plain, now, persistence.KeyReplace, persistence.Scheduled{ID: "plain", Outcome: persistence.Created})
	got, err := store.Peek(ctx, "plain")
	require.NoError(t, err)
	requireSameTimeout(t, plain, got)
	changed := plain
	changed.Payload = []byte("another payload")
	mustSchedule(ctx, t, sch, changed, now, persistence.KeyReplace, persistence.Scheduled{ID: "plain", Outcome: persistence.Existed})
	got, err = store.Peek(ctx, "plain")
	require.NoError(t, err)
	requireSameTimeout(t, plain, got) // a redelivery changes nothing

	k := keyed("k1", "order-42/payment", now.Add(time.Minute))
	mustSchedule(ctx, t, sch, k, now, persistence.KeyKeep, persistence.Scheduled{ID: "k1", Outcome: persistence.Created})
	got, err = store.Peek(ctx, "k1")
	require.NoError(t, err)
	requireSameTimeout(t, k, got)
	require.Equal(t, "order-42/payment", got.Key, "Peek returns the key")
	mustSchedule(ctx, t, sch, k, now, persistence.KeyKeep, persistence.Scheduled{ID: "k1", Outcome: persistence.Existed})

	// The stored key makes a claimable timeout like any other.
	ids, err := store.ClaimDue(ctx, now.Add(time.Minute), 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"plain", "k1"}, ids)

	_, err = store.Store(ctx, keyed("k2", "other", now))
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "Store of a keyed timeout")
	if batch, ok := store.(persistence.BatchStore); ok {
		_, err = batch.StoreMany(ctx, []persistence.Timeout{timeout("k3", now), keyed("k4", "other", now)})
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "StoreMany with a keyed timeout")
	}
	for _, id := range []string{"k2", "k3", "k4"} {
		_, err = store.Peek(ctx, id)
		require.ErrorIs(t, err, persistence.ErrNotFound, "%s was refused, so is not stored", id)
	}

	for name, bad := range map[string]persistence.Timeout{
		"empty id":    keyed("", "key", now),
		"long key":    keyed("long", string(make([]byte, persistence.MaxIDLength+1)), now),
		"due in 9999": keyed("late", "key", persistence.MaxDue.Add(time.Microsecond)),
	} {
		_, err := sch.Schedule(ctx, bad, now, persistence.KeyReplace)
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout, name)
	}
	_, err = sch.Schedule(ctx, keyed("policy", "key", now), now, persistence.KeyPolicy(7))
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "an unknown policy")
}

// testScheduleKeys: a key held by a pending timeout is replaced or kept by policy; a claimed
// holder is being delivered, so the new timeout is stored beside it and takes the key.
func (s suite) testScheduleKeys(t *testing.T) {
	store, ctx := s.setup(t)
	sch := scheduler(t, store)
	now := base()
	requireGone := func(id string) {
		t.Helper()
		_, err := store.Peek(ctx, id)
		require.ErrorIs(t, err, persistence.ErrNotFound, "Peek %q", id)
	}

	// Replace: the new timeout, its due time and payload, in place of the old one.
	mustSchedule(ctx, t, sch, keyed("r1", "r", now.Add(time.Hour)), now, persistence.KeyReplace,
		persistence.Scheduled{ID: "r1", Outcome: persistence.Created})
	r2 := keyed("r2", "r", now.Add(2*time.Minute))
	r2.Payload = []byte("the replacement")
	mustSchedule(ctx, t, sch, r2, now, persistence.KeyReplace,
		persistence.Scheduled{ID: "r2", Outcome: persistence.Replaced, Replaced: "r1"})
	requireGone("r1")
	got, err := store.Peek(ctx, "r2")
	require.NoError(t, err)
	requireSameTimeout(t, r2, got)

	// Keep: the pending one stays, the new one is dropped.
	mustSchedule(ctx, t, sch, keyed("k1", "k", now.Add(time.Hour)), now, persistence.KeyKeep,
		persistence.Scheduled{ID: "k1", Outcome: persistence.Created})
	mustSchedule(ctx, t, sch, keyed("k2", "k", now.Add(time.Minute)), now, persistence.KeyKeep,
		persistence.Scheduled{ID: "k1", Outcome: persistence.Duplicate})
	requireGone("k2")
	got, err = store.Peek(ctx, "k1")
	require.NoError(t, err)
	require.True(t, now.Add(time.Hour).Equal(got.Due), "the kept timeout keeps its due time")

	// A claimed holder is being delivered: under either policy the new timeout is stored beside
	// it, and holds the key from then on.
	for _, policy := range []persistence.KeyPolicy{persistence.KeyReplace, persistence.KeyKeep} {
		key := "claimed-" + policy.String()
		old, next := key+"-old", key+"-new"
		mustSchedule(ctx, t, sch, keyed(old, key, now), now, policy, persistence.Scheduled{ID: old, Outcome: persistence.Created})
		ids, err := store.ClaimDue(ctx, now, 100, time.Hour)
		require.NoError(t, err)
		require.Equal(t, []string{old}, ids)
		mustSchedule(ctx, t, sch, keyed(next, key, now.Add(time.Hour)), now, policy,
			persistence.Scheduled{ID: next, Outcome: persistence.Created})
		got, err := store.Peek(ctx, old)
		require.NoError(t, err, "the claimed timeout is still there to be delivered")
		require.Empty(t, got.Key, "the claimed timeout gave up its key")
		mustSchedule(ctx, t, sch, keyed(key+"-third", key, now.Add(time.Hour)), now, persistence.KeyKeep,
			persistence.Scheduled{ID: next, Outcome: persistence.Duplicate})
		removed, err := store.Remove(ctx, old)
		require.NoError(t, err)
		require.True(t, removed)
	}

	// A claim whose lease ran out is pending again, and holds its key.
	mustSchedule(ctx, t, sch, keyed("l1", "l", now), now, persistence.KeyReplace, persistence.Scheduled{ID: "l1", Outcome: persistence.Created})
	ids, err := store.ClaimDue(ctx, now, 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"l1"}, ids)
	later := now.Add(2 * time.Minute)
	mustSchedule(ctx, t, sch, keyed("l2", "l", later), later, persistence.KeyKeep, persistence.Scheduled{ID: "l1", Outcome: persistence.Duplicate})

	// A key freed by delivery or cancel can be taken again.
	removed, err := store.Remove(ctx, "l1")
	require.NoError(t, err)
	require.True(t, removed)
	mustSchedule(ctx, t, sch, keyed("l3", "l", later), later, persistence.KeyKeep, persistence.Scheduled{ID: "l3", Outcome: persistence.Created})
	cancelled, err := store.Cancel(ctx, "l3")
	require.NoError(t, err)
	require.True(t, cancelled)
	mustSchedule(ctx, t, sch, keyed("l4", "l", later), later, persistence.KeyKeep, persistence.Scheduled{ID: "l4", Outcome: persistence.Created})

	// Keys are compared exactly: case and trailing spaces make other keys.
	for _, other := range []string{"L", "l ", "l\x00"} {
		to := keyed("other-"+fmt.Sprintf("%q", other), other, later)
		got, err := sch.Schedule(ctx, to, later, persistence.KeyKeep)
		if err != nil {
			require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "key %q", other) // a key the store cannot keep
			continue
		}
		require.Equal(t, persistence.Created, got.Outcome, "key %q is not key %q", other, "l")
	}
}

// testScheduleKeyRace: schedulers racing on one key leave exactly one pending timeout with it.
func (s suite) testScheduleKeyRace(t *testing.T) {
	store, ctx := s.setup(t)
	sch := scheduler(t, store)
	now := base()
	const schedulers, rounds = 8, 10
	for _, policy := range []persistence.KeyPolicy{persistence.KeyReplace, persistence.KeyKeep} {
		key := "race-" + policy.String()
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			outcomes = map[persistence.Outcome]int{}
			firstErr error
		)
		for w := range schedulers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					got, err := sch.Schedule(ctx, keyed(fmt.Sprintf("%s-%d-%d", key, w, r), key, now.Add(time.Hour)), now, policy)
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					outcomes[got.Outcome]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.NoError(t, firstErr, "%s: Schedule", policy)
		if inspector, ok := store.(persistence.Inspector); ok {
			list, err := inspector.List(ctx, persistence.ListOptions{Key: key})
			require.NoError(t, err)
			require.Len(t, list, 1, "%s: one timeout holds the key", policy)
		}
		switch policy {
		case persistence.KeyReplace:
			require.Equal(t, 1, outcomes[persistence.Created], "replace: one created, %v", outcomes)
			require.Equal(t, schedulers*rounds-1, outcomes[persistence.Replaced], "replace: the others replaced, %v", outcomes)
		case persistence.KeyKeep:
			require.Equal(t, 1, outcomes[persistence.Created], "keep: one created, %v", outcomes)
			require.Equal(t, schedulers*rounds-1, outcomes[persistence.Duplicate], "keep: the others dropped, %v", outcomes)
		}
	}
	all := claimAll(ctx, t, store, now.Add(2*time.Hour), 100)
	require.Len(t, all, 2, "one timeout per key is left to deliver")
}

// testReschedule: Reschedule moves a pending timeout's due time in place, and leaves a claimed
// one alone.
func (s suite) testReschedule(t *testing.T) {
	store, ctx := s.setup(t)
	sch := scheduler(t, store)
	now := base()

	to := timeout("r", now.Add(time.Hour))
	to.Owner = "order-1"
	to.Metadata["header"] = "value"
	mustStore(ctx, t, store, to)
	ok, err := store.IncrementFailureCount(ctx, "r")
	require.NoError(t, err)
	require.True(t, ok)

	// Earlier: claimable at the new due time, not before.
	earlier := now.Add(time.Minute)
	ok, err = sch.Reschedule(ctx, "r", earlier, now)
	require.NoError(t, err)
	require.True(t, ok, "Reschedule of a pending timeout")
	got, err := store.Peek(ctx, "r")
	require.NoError(t, err)
	want := to
	want.Due = earlier
	requireSameTimeout(t, want, got)
	require.Equal(t, 1, got.FailureCount, "Reschedule keeps the failure count")
	next, found, err := store.Next(ctx)
	require.NoError(t, err)
	require.True(t, found)
	require.True(t, earlier.Equal(next), "Next after Reschedule: want %s, got %s", earlier, next)
	ids, err := store.ClaimDue(ctx, earlier.Add(-time.Microsecond), 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids, "claimed before its new due time")

	// Later: not claimable at the old due time.
	later := now.Add(2 * time.Hour)
	ok, err = sch.Reschedule(ctx, "r", later, now)
	require.NoError(t, err)
	require.True(t, ok)
	ids, err = store.ClaimDue(ctx, now.Add(time.Hour), 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids, "claimed at its old due time")
	ids, err = store.ClaimDue(ctx, later, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"r"}, ids)

	// Claimed: being delivered at its due time, so Reschedule changes nothing.
	ok, err = sch.Reschedule(ctx, "r", later.Add(time.Hour), later)
	require.NoError(t, err)
	require.False(t, ok, "Reschedule of a claimed timeout")
	got, err = store.Peek(ctx, "r")
	require.NoError(t, err)
	require.True(t, later.Equal(got.Due), "a claimed timeout keeps its due time")
	// Once the lease ran out it is pending again.
	afterLease := later.Add(2 * time.Minute)
	ok, err = sch.Reschedule(ctx, "r", afterLease, afterLease)
	require.NoError(t, err)
	require.True(t, ok, "Reschedule after the claim's lease ran out")
	ids, err = store.ClaimDue(ctx, afterLease, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"r"}, ids, "rescheduled to now: claimable at once")

	// Gone or never stored: false, not an error.
	removed, err := store.Remove(ctx, "r")
	require.NoError(t, err)
	require.True(t, removed)
	ok, err = sch.Reschedule(ctx, "r", now, now)
	require.NoError(t, err)
	require.False(t, ok, "Reschedule of a delivered timeout")
	ok, err = sch.Reschedule(ctx, "never", now, now)
	require.NoError(t, err)
	require.False(t, ok, "Reschedule of an unknown id")

	mustStore(ctx, t, store, timeout("range", now.Add(time.Hour)))
	for _, due := range []time.Time{persistence.MaxDue.Add(time.Microsecond), persistence.MinDue.Add(-time.Second)} {
		_, err = sch.Reschedule(ctx, "range", due, now)
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "Reschedule to %s", due)
		require.ErrorContains(t, err, "out of range")
	}
}

// testListFilters: List's filters and its paging, which stays stable while timeouts come and go.
func (s suite) testListFilters(t *testing.T) {
	store, ctx := s.setup(t)
	inspector, ok := store.(persistence.Inspector)
	if !ok {
		t.Skipf("%T does not implement persistence.Inspector", store)
	}
	sch, hasScheduler := store.(persistence.Scheduler)
	now := base()
	var all []string
	for i := range 30 {
		to := timeout(fmt.Sprintf("t%02d", i), now.Add(time.Duration(i/3)*time.Minute)) // ties of three
		if i%2 == 1 {
			to.Destination = "invoices"
		}
		to.Owner = fmt.Sprintf("owner-%d", i%3)
		mustStore(ctx, t, store, to)
		all = append(all, to.ID)
	}
	ids := func(list []persistence.Timeout) []string {
		out := make([]string, len(list))
		for i, to := range list {
			out[i] = to.ID
		}
		return out
	}
	list := func(opts persistence.ListOptions) []string {
		t.Helper()
		got, err := inspector.List(ctx, opts)
		require.NoError(t, err, "List(%+v)", opts)
		return ids(got)
	}
	require.Equal(t, all, list(persistence.ListOptions{}))
	require.Equal(t, []string{"t01", "t03", "t05"}, list(persistence.ListOptions{Destination: "invoices", Limit: 3}))
	require.Equal(t, []string{"t06", "t07", "t08"}, list(persistence.ListOptions{
		DueFrom: now.Add(2 * time.Minute), DueBefore: now.Add(3 * time.Minute)}))
	require.Equal(t, []string{"t07"}, list(persistence.ListOptions{
		DueFrom: now.Add(2 * time.Minute), DueBefore: now.Add(3 * time.Minute), Destination: "invoices", Owner: "owner-1"}))
	require.Empty(t, list(persistence.ListOptions{Destination: "nowhere"}))
	if hasScheduler {
		_, err := sch.Schedule(ctx, keyed("keyed", "the-key", now.Add(time.Hour)), now, persistence.KeyKeep)
		require.NoError(t, err)
		got, err := inspector.List(ctx, persistence.ListOptions{Key: "the-key"})
		require.NoError(t, err)
		require.Equal(t, []string{"keyed"}, ids(got))
		require.Equal(t, "the-key", got[0].Key, "List returns the key")
		all = append(all, "keyed")
	}

	// Pages of 4 after the last of the previous page, while timeouts come and go: every timeout
	// that stays is listed once, in order.
	var paged []string
	after := persistence.Position{}
	cancelled := map[string]bool{}
	for page := 0; ; page++ {
		got, err := inspector.List(ctx, persistence.ListOptions{Limit: 4, After: after})
		require.NoError(t, err)
		if len(got) == 0 {
			break
		}
		require.LessOrEqual(t, len(got), 4)
		paged = append(paged, ids(got)...)
		last := got[len(got)-1]
		after = persistence.Position{Due: last.Due, ID: last.ID}
		// Between pages: one not listed yet is cancelled, one is added before the cursor.
		if i := slices.Index(all, last.ID); i >= 0 && i+2 < len(all) {
			victim := all[i+2]
			ok, err := store.Cancel(ctx, victim)
			require.NoError(t, err)
			require.True(t, ok, "Cancel %q", victim)
			cancelled[victim] = true
		}
		mustStore(ctx, t, store, timeout(fmt.Sprintf("early-%d", page), now.Add(-time.Hour)))
	}
	var want []string
	for _, id := range all {
		if !cancelled[id] {
			want = append(want, id)
		}
	}
	require.NotEmpty(t, cancelled)
	require.Equal(t, want, paged, "paging while timeouts come and go")
}

// testStatsAtNow: Stats counts what is due and what is claimed at the now it is given, and each
// destination's timeouts.
func (s suite) testStatsAtNow(t *testing.T) {
	store, ctx := s.setup(t)
	inspector, ok := store.(persistence.Inspector)
	if !ok {
		t.Skipf("%T does not implement persistence.Inspector", store)
	}
	now := base()
	for i, minutes := range []int{-10, -1, 0, 5, 60} {
		to := timeout(fmt.Sprintf("s%d", i), now.Add(time.Duration(minutes)*time.Minute))
		if i >= 3 {
			to.Destination = "invoices"
		}
		mustStore(ctx, t, store, to)
	}
	ids, err := store.ClaimDue(ctx, now, 1, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"s0"}, ids)
	st, err := inspector.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 5, st.Pending)
	require.Equal(t, 3, st.DueNow, "due at now, overdue ones included")
	require.Equal(t, 1, st.Claimed)
	require.True(t, now.Add(-10*time.Minute).Equal(st.Earliest), "Earliest: %s", st.Earliest)
	require.True(t, now.Add(time.Hour).Equal(st.Latest), "Latest: %s", st.Latest)
	require.Equal(t, map[string]int{"orders": 3, "invoices": 2}, st.ByDestination)
	// The claim's lease is over an hour later: nothing is claimed then.
	st, err = inspector.Stats(ctx, now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 5, st.DueNow)
	require.Zero(t, st.Claimed)
}
