package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// testHandover checks persistence.Handover, for the stores that implement it: hidden timeouts
// are out of every poller's reach, live leases are never taken, a stopped caller's timeouts can
// be taken over, and released ones are claimable again.
func (s suite) testHandover(t *testing.T) {
	store, _ := s.setup(t)
	if _, ok := store.(persistence.Handover); !ok {
		t.Skipf("%T does not implement persistence.Handover", store)
	}
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"HideTakesAllButLiveLeases", s.testHideTakesAllButLiveLeases},
		{"HideFromLimitAndOrder", s.testHideFromLimitAndOrder},
		{"HideTakesOverAnotherMark", s.testHideTakesOverAnotherMark},
		{"ReleaseAndSurvey", s.testReleaseAndSurvey},
		{"ConcurrentHiders", s.testConcurrentHiders},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t)
		})
	}
}

func (s suite) handover(t *testing.T) (persistence.Store, persistence.Handover) {
	store, _ := s.setup(t)
	return store, store.(persistence.Handover)
}

// mark returns a hiding mark at microsecond precision.
func mark(n int) time.Time {
	return persistence.HiddenFrom.Add(time.Duration(n) * time.Hour)
}

func idsOf(ts []persistence.Timeout) []string {
	out := make([]string, len(ts))
	for i, to := range ts {
		out[i] = to.ID
	}
	return out
}

func (s suite) testHideTakesAllButLiveLeases(t *testing.T) {
	store, h := s.handover(t)
	ctx := t.Context()
	now := base()
	leased := timeout("leased", now.Add(-2*time.Minute))
	past := timeout("past", now.Add(-time.Minute))
	future := timeout("future", now.Add(time.Hour))
	far := timeout("far", now.AddDate(20, 0, 0))
	far.Owner, far.Metadata = "order-9", map[string]string{"a": "1", "b": ""}
	mustStore(ctx, t, store, leased)
	claimed, err := store.ClaimDue(ctx, now, 1, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"leased"}, claimed)
	mustStore(ctx, t, store, past, future, far)

	got, err := h.Hide(ctx, now, persistence.MinDue, 10, mark(1))
	require.NoError(t, err)
	require.Equal(t, []string{"past", "future", "far"}, idsOf(got), "whole timeouts, earliest due first, not the one a poller holds")
	for i, want := range []persistence.Timeout{past, future, far} {
		requireSameTimeout(t, want, got[i])
	}
	again, err := h.Hide(ctx, now, persistence.MinDue, 10, mark(1))
	require.NoError(t, err)
	require.Empty(t, again, "a mark's own timeouts are not handed out twice")

	ids, err := store.ClaimDue(ctx, persistence.HiddenFrom.Add(-time.Hour), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"leased"}, ids, "hidden timeouts are out of every poller's reach; the lease ended")
	peeked, err := store.Peek(ctx, "far")
	require.NoError(t, err)
	requireSameTimeout(t, far, peeked)

	// Once its lease is over, the poller's timeout can be hidden too.
	got, err = h.Hide(ctx, persistence.HiddenFrom.Add(-time.Hour+2*time.Minute), persistence.MinDue, 10, mark(1))
	require.NoError(t, err)
	require.Equal(t, []string{"leased"}, idsOf(got))

	removed, err := store.Remove(ctx, "past")
	require.NoError(t, err)
	require.True(t, removed, "Remove works on hidden timeouts")
	cancelled, err := store.Cancel(ctx, "future")
	require.NoError(t, err)
	require.True(t, cancelled, "Cancel works on hidden timeouts")
}

func (s suite) testHideFromLimitAndOrder(t *testing.T) {
	store, h := s.handover(t)
	ctx := t.Context()
	now := base()
	for i, minutes := range []int{50, -10, 30, 10, -30, 40, 20} {
		mustStore(ctx, t, store, timeout(string(rune('a'+i)), now.Add(time.Duration(minutes)*time.Minute)))
	}
	from := now.Add(-10 * time.Minute) // b is due exactly then: included; e is before: not

	got, err := h.Hide(ctx, now, from, 3, mark(2))
	require.NoError(t, err)
	require.Equal(t, []string{"b", "d", "g"}, idsOf(got), "earliest due first, at most limit")
	got, err = h.Hide(ctx, now, from, 3, mark(2))
	require.NoError(t, err)
	require.Equal(t, []string{"c", "f", "a"}, idsOf(got))
	got, err = h.Hide(ctx, now, from, 3, mark(2))
	require.NoError(t, err)
	require.Empty(t, got)
	none, err := h.Hide(ctx, now, from, 0, mark(3))
	require.NoError(t, err)
	require.Empty(t, none, "limit 0 hides nothing")

	claimed, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"e"}, claimed, "the timeout due before from stays with the pollers")
}

func (s suite) testHideTakesOverAnotherMark(t *testing.T) {
	store, h := s.handover(t)
	ctx := t.Context()
	now := base()
	mustStore(ctx, t, store, timeout("early", now.Add(time.Minute)), timeout("late", now.Add(time.Hour)))
	got, err := h.Hide(ctx, now, persistence.MinDue, 1, mark(4))
	require.NoError(t, err)
	require.Equal(t, []string{"early"}, idsOf(got))

	// The first caller stopped; another takes over what it hid, after everything else.
	got, err = h.Hide(ctx, now, persistence.MinDue, 1, mark(5))
	require.NoError(t, err)
	require.Equal(t, []string{"late"}, idsOf(got))
	got, err = h.Hide(ctx, now, persistence.MinDue, 5, mark(5))
	require.NoError(t, err)
	require.Equal(t, []string{"early"}, idsOf(got))
	got, err = h.Hide(ctx, now, persistence.MinDue, 5, mark(5))
	require.NoError(t, err)
	require.Empty(t, got)

	// A caller with a later from still takes over what a stopped caller hid, so that it can put
	// back what it will not hand over; nothing stays hidden for good.
	got, err = h.Hide(ctx, now, now.Add(2*time.Hour), 5, mark(6))
	require.NoError(t, err)
	require.Equal(t, []string{"early", "late"}, idsOf(got))
}

func (s suite) testReleaseAndSurvey(t *testing.T) {
	store, h := s.handover(t)
	ctx := t.Context()
	now := base()
	past := timeout("past", now.Add(-time.Minute))
	future := timeout("future", now.Add(time.Hour))
	other := timeout("other", now.Add(2*time.Hour))
	other.Destination = "billing"
	early := timeout("early", now.Add(-time.Hour))
	mustStore(ctx, t, store, past, future, other, early)

	sv, err := h.Survey(ctx, now.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, 3, sv.Count)
	require.True(t, other.Due.Equal(sv.Latest), "Latest %s", sv.Latest)
	require.Equal(t, map[string]int{"orders": 2, "billing": 1}, sv.Destinations)
	require.Zero(t, sv.Hidden)

	got, err := h.Hide(ctx, now, now.Add(-time.Minute), 2, mark(6))
	require.NoError(t, err)
	require.Equal(t, []string{"past", "future"}, idsOf(got))
	sv, err = h.Survey(ctx, persistence.MinDue)
	require.NoError(t, err)
	require.Equal(t, 4, sv.Count)
	require.Equal(t, 2, sv.Hidden)

	n, err := h.Release(ctx, []string{"past", "future", "no-such-id"})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	sv, err = h.Survey(ctx, persistence.MinDue)
	require.NoError(t, err)
	require.Zero(t, sv.Hidden)
	claimed, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"early", "past"}, claimed, "released timeouts are claimable again from their due time")
	next, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, next.Equal(now.Add(time.Minute)), "the lease ends first: %s", next)
	claimed, err = store.ClaimDue(ctx, now.Add(time.Hour), 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"early", "past", "future"}, claimed, "a released future timeout becomes claimable at its due time")

	empty, err := h.Survey(ctx, now.Add(3*time.Hour))
	require.NoError(t, err)
	require.Zero(t, empty.Count)
	require.True(t, empty.Latest.IsZero())
	require.Empty(t, empty.Destinations)
}

func (s suite) testConcurrentHiders(t *testing.T) {
	store, h := s.handover(t)
	ctx := t.Context()
	now := base()
	const n, hiders = 600, 6
	storeConcurrently(ctx, t, store, n, 8, func(i int) persistence.Timeout {
		return timeout(string(rune(0x4e00+i)), now.Add(time.Duration(i-n/2)*time.Second))
	})
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all []string
	)
	for range hiders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := h.Hide(ctx, now, persistence.MinDue, 25, mark(7))
				if !assertNoError(t, err) || len(got) == 0 {
					return
				}
				mu.Lock()
				all = append(all, idsOf(got)...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, requireUnique(t, all), n, "every timeout hidden exactly once")
}

// assertNoError reports err from a goroutine other than the test's.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("Hide: %v", err)
		return false
	}
	return true
}
