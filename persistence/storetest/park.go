package storetest

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// testParker checks persistence.Parker, for the stores that implement it: a parked timeout is
// never claimed, hidden, released, rescheduled or surveyed, holds no key, is shown by Peek,
// PeekMany, List and Stats, and is claimable again at once once unparked.
func (s suite) testParker(t *testing.T) {
	store, _ := s.setup(t)
	if _, ok := store.(persistence.Parker); !ok {
		t.Skipf("%T does not implement persistence.Parker", store)
	}
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Park", s.testPark},
		{"ParkedIsLeftAlone", s.testParkedIsLeftAlone},
		{"ParkedIsShown", s.testParkedIsShown},
		{"Unpark", s.testUnpark},
		{"ParkedIsDeleted", s.testParkedIsDeleted},
		{"DeleteParked", s.testDeleteParked},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t)
		})
	}
}

func (s suite) parker(t *testing.T) (persistence.Store, persistence.Parker) {
	store, _ := s.setup(t)
	return store, store.(persistence.Parker)
}

func mustPark(t *testing.T, p persistence.Parker, id, reason string) {
	t.Helper()
	parked, err := p.Park(t.Context(), id, reason)
	require.NoError(t, err, "Park %q", id)
	require.True(t, parked, "Park %q: found", id)
}

func (s suite) testPark(t *testing.T) {
	store, p := s.parker(t)
	ctx := t.Context()
	now := base()
	mustStore(ctx, t, store, timeout("claimed", now.Add(-time.Minute)), timeout("pending", now.Add(time.Hour)))
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"claimed"}, ids)

	mustPark(t, p, "claimed", "too big for the broker")
	mustPark(t, p, "pending", "first reason")
	mustPark(t, p, "pending", "second reason")
	mustPark(t, p, "pending", "second reason") // found, though nothing changes
	got, err := store.Peek(ctx, "pending")
	require.NoError(t, err)
	require.Equal(t, "second reason", got.Parked, "parking again replaces the reason")

	parked, err := p.Park(ctx, "gone", "reason")
	require.NoError(t, err)
	require.False(t, parked, "no timeout with that id")

	_, err = p.Park(ctx, "pending", "")
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "an empty reason is refused")
	got, err = store.Peek(ctx, "pending")
	require.NoError(t, err)
	require.Equal(t, "second reason", got.Parked, "a refused Park changes nothing")

	// A long reason is kept from its start, cut on a character boundary: 'é' is two bytes, so
	// the limit falls inside one.
	long := "x" + strings.Repeat("é", persistence.MaxParkReasonLength)
	mustPark(t, p, "claimed", long)
	got, err = store.Peek(ctx, "claimed")
	require.NoError(t, err)
	require.True(t, utf8.ValidString(got.Parked), "cut on a character boundary")
	require.LessOrEqual(t, len(got.Parked), persistence.MaxParkReasonLength)
	require.GreaterOrEqual(t, len(got.Parked), persistence.MaxParkReasonLength-utf8.UTFMax)
	require.True(t, strings.HasPrefix(long, got.Parked), "the start of the reason is kept")
}

func (s suite) testParkedIsLeftAlone(t *testing.T) {
	store, p := s.parker(t)
	ctx := t.Context()
	now := base()
	keyed := timeout("keyed", now.Add(-time.Minute))
	keyed.Key = "k"
	mustStore(ctx, t, store, timeout("parked", now.Add(-2*time.Minute)), timeout("far", persistence.MaxDue))
	if sch, ok := store.(persistence.Scheduler); ok {
		got, err := sch.Schedule(ctx, keyed, now, persistence.KeyKeep)
		require.NoError(t, err)
		require.Equal(t, persistence.Created, got.Outcome)
	} else {
		mustStore(ctx, t, store, timeout("keyed", now.Add(-time.Minute)))
	}
	mustPark(t, p, "parked", "reason")
	mustPark(t, p, "keyed", "reason")
	mustPark(t, p, "far", "reason") // due at MaxDue, where a parked timeout waits

	for _, at := range []time.Time{now, now.AddDate(100, 0, 0)} {
		ids, err := store.ClaimDue(ctx, at, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, ids, "a parked timeout is never claimed")
	}
	if c, ok := store.(persistence.Claimer); ok {
		ids, err := c.ClaimDueAs(ctx, "a", now, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, ids, "nor claimed as an instance")
	}
	if h, ok := store.(persistence.Handover); ok {
		hidden, err := h.Hide(ctx, now, persistence.MinDue, 10, mark(1))
		require.NoError(t, err)
		require.Empty(t, hidden, "nor hidden")
		sv, err := h.Survey(ctx, persistence.MinDue)
		require.NoError(t, err)
		require.Zero(t, sv.Count, "nor surveyed")
		require.Zero(t, sv.Hidden)
		n, err := h.Release(ctx, []string{"parked", "keyed", "far"})
		require.NoError(t, err)
		require.Zero(t, n, "nor released")
	}
	if sch, ok := store.(persistence.Scheduler); ok {
		moved, err := sch.Reschedule(ctx, "parked", now.Add(-time.Hour), now)
		require.NoError(t, err)
		require.False(t, moved, "nor rescheduled")
		// A parked timeout holds no key, as one being delivered holds none.
		again := keyed
		again.ID = "keyed-again"
		got, err := sch.Schedule(ctx, again, now, persistence.KeyKeep)
		require.NoError(t, err)
		require.Equal(t, persistence.Scheduled{ID: "keyed-again", Outcome: persistence.Created}, got, "the key is free")
		parked, err := store.Peek(ctx, "keyed")
		require.NoError(t, err)
		require.Empty(t, parked.Key, "the parked timeout gave its key up")
		require.Equal(t, "reason", parked.Parked)
		_, err = store.Cancel(ctx, "keyed-again")
		require.NoError(t, err)
	}
	ids, err := store.ClaimDue(ctx, now.AddDate(100, 0, 0), 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids, "still parked")
	for _, id := range []string{"parked", "keyed", "far"} {
		got, err := store.Peek(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "reason", got.Parked, "%s is still parked", id)
	}
}

func (s suite) testParkedIsShown(t *testing.T) {
	store, p := s.parker(t)
	ctx := t.Context()
	now := base()
	parked := timeout("parked", now.Add(-time.Minute))
	parked.Owner = "order-1"
	mustStore(ctx, t, store, parked, timeout("due", now.Add(-time.Second)), timeout("claimed", now.Add(-2*time.Second)),
		timeout("later", now.Add(time.Hour)))
	ids, err := store.ClaimDue(ctx, now, 1, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"parked"}, ids)
	ids, err = store.ClaimDue(ctx, now, 1, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"claimed"}, ids)
	mustPark(t, p, "parked", "refused by the broker")

	got, err := store.Peek(ctx, "parked")
	require.NoError(t, err)
	requireSameTimeout(t, parked, got)
	require.Equal(t, "refused by the broker", got.Parked)
	other, err := store.Peek(ctx, "due")
	require.NoError(t, err)
	require.Empty(t, other.Parked, "a timeout that is not parked")

	if b, ok := store.(persistence.BatchStore); ok {
		many, err := b.PeekMany(ctx, []string{"parked", "due"})
		require.NoError(t, err)
		require.Len(t, many, 2)
		reasons := map[string]string{}
		for _, to := range many {
			reasons[to.ID] = to.Parked
		}
		require.Equal(t, map[string]string{"parked": "refused by the broker", "due": ""}, reasons)
	}
	insp, ok := store.(persistence.Inspector)
	if !ok {
		return
	}
	list, err := insp.List(ctx, persistence.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"parked", "claimed", "due", "later"}, idsOf(list), "every timeout, parked included")
	require.Equal(t, "refused by the broker", list[0].Parked)
	require.Empty(t, list[1].Parked)
	list, err = insp.List(ctx, persistence.ListOptions{Parked: true})
	require.NoError(t, err)
	require.Equal(t, []string{"parked"}, idsOf(list), "ListOptions.Parked lists only parked ones")
	require.Equal(t, "refused by the broker", list[0].Parked)
	list, err = insp.List(ctx, persistence.ListOptions{Parked: true, Owner: "order-1"})
	require.NoError(t, err)
	require.Equal(t, []string{"parked"}, idsOf(list))
	list, err = insp.List(ctx, persistence.ListOptions{Parked: true, Destination: "elsewhere"})
	require.NoError(t, err)
	require.Empty(t, list)

	st, err := insp.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 4, st.Pending, "Pending counts parked ones")
	require.Equal(t, 1, st.Parked)
	require.Equal(t, 2, st.DueNow, "due and claimed, not the parked one")
	require.Equal(t, 1, st.Claimed, "the claimed one, not the parked one")
	require.True(t, parked.Due.Equal(st.Earliest), "Earliest is the earliest stored due time: %s", st.Earliest)
}

func (s suite) testUnpark(t *testing.T) {
	store, p := s.parker(t)
	ctx := t.Context()
	now := base()
	mustStore(ctx, t, store, timeout("past", now.Add(-time.Minute)), timeout("future", now.Add(time.Hour)),
		timeout("not-parked", now.Add(-time.Second)))
	for range 3 {
		_, err := store.IncrementFailureCount(ctx, "past")
		require.NoError(t, err)
	}
	ids, err := store.ClaimDue(ctx, now, 1, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"past"}, ids)
	mustPark(t, p, "past", "reason")
	mustPark(t, p, "future", "reason")

	n, err := p.Unpark(ctx, []string{"past", "future", "not-parked", "gone"})
	require.NoError(t, err)
	require.Equal(t, 2, n, "only parked ones count")
	got, err := store.Peek(ctx, "past")
	require.NoError(t, err)
	require.Empty(t, got.Parked)
	require.Zero(t, got.FailureCount, "its failure count is back at 0")

	ids, err = store.ClaimDue(ctx, now, 10, 2*time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"past", "not-parked"}, ids, "an overdue unparked timeout is claimable at once")
	ids, err = store.ClaimDue(ctx, now.Add(time.Hour), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"future"}, ids, "a future one from its due time")
	n, err = p.Unpark(ctx, []string{"past"})
	require.NoError(t, err)
	require.Zero(t, n, "unparking again does nothing")
	n, err = p.Unpark(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

func (s suite) testParkedIsDeleted(t *testing.T) {
	store, p := s.parker(t)
	ctx := t.Context()
	now := base()
	owned := timeout("owned", now)
	owned.Owner = "order-1"
	mustStore(ctx, t, store, timeout("removed", now), timeout("cancelled", now), owned)
	for _, id := range []string{"removed", "cancelled", "owned"} {
		mustPark(t, p, id, "reason")
	}
	removed, err := store.Remove(ctx, "removed")
	require.NoError(t, err)
	require.True(t, removed)
	cancelled, err := store.Cancel(ctx, "cancelled")
	require.NoError(t, err)
	require.True(t, cancelled)
	n, err := store.CancelByOwner(ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	for _, id := range []string{"removed", "cancelled", "owned"} {
		_, err := store.Peek(ctx, id)
		require.ErrorIs(t, err, persistence.ErrNotFound, id)
	}
	_, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.False(t, ok, "nothing is left")
}

// testDeleteParked: DeleteParked deletes parked timeouts and nothing else. A timeout replayed
// (Unpark) before the delete reaches it is pending again, and is kept: an operator deleting a
// parked timeout while another replays it never deletes one that is about to be delivered.
func (s suite) testDeleteParked(t *testing.T) {
	store, p := s.parker(t)
	ctx := t.Context()
	now := base()
	mustStore(ctx, t, store, timeout("parked", now), timeout("replayed", now), timeout("pending", now))
	mustPark(t, p, "parked", "reason")
	mustPark(t, p, "replayed", "reason")
	n, err := p.Unpark(ctx, []string{"replayed"})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	n, err = p.DeleteParked(ctx, []string{"parked", "replayed", "pending", "gone"})
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the parked one is deleted")
	_, err = store.Peek(ctx, "parked")
	require.ErrorIs(t, err, persistence.ErrNotFound)
	for _, id := range []string{"replayed", "pending"} {
		got, err := store.Peek(ctx, id)
		require.NoError(t, err, "%s is kept", id)
		require.Empty(t, got.Parked, id)
	}
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"replayed", "pending"}, ids, "both are still delivered")

	n, err = p.DeleteParked(ctx, []string{"parked"})
	require.NoError(t, err)
	require.Zero(t, n, "deleting again does nothing")
	n, err = p.DeleteParked(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// testClaimer checks persistence.Claimer, for the stores that implement it: claims record their
// instance, ReleaseClaimsOf gives back exactly that instance's live claims, and a name is held
// by one holder at a time.
func (s suite) testClaimer(t *testing.T) {
	store, _ := s.setup(t)
	if _, ok := store.(persistence.Claimer); !ok {
		t.Skipf("%T does not implement persistence.Claimer", store)
	}
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"ReleaseClaimsOf", s.testReleaseClaimsOf},
		{"LeaseRunOutClearsTheTag", s.testLeaseRunOutClearsTheTag},
		{"HoldInstance", s.testHoldInstance},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t)
		})
	}
}

func (s suite) claimer(t *testing.T) (persistence.Store, persistence.Claimer) {
	store, _ := s.setup(t)
	return store, store.(persistence.Claimer)
}

func (s suite) testReleaseClaimsOf(t *testing.T) {
	store, c := s.claimer(t)
	ctx := t.Context()
	now := base()
	for i, id := range []string{"a1", "a2", "a3", "b1", "plain", "hidden", "parked", "released"} {
		mustStore(ctx, t, store, timeout(id, now.Add(time.Duration(i-10)*time.Second)))
	}
	claim := func(by string, want ...string) {
		t.Helper()
		var (
			ids []string
			err error
		)
		if by == "" {
			ids, err = store.ClaimDue(ctx, now, len(want), time.Hour)
		} else {
			ids, err = c.ClaimDueAs(ctx, by, now, len(want), time.Hour)
		}
		require.NoError(t, err)
		require.Equal(t, want, ids)
	}
	mustStore(ctx, t, store, timeout("given-back", now.Add(-20*time.Second)))
	claim("a", "given-back")
	if h, ok := store.(persistence.Handover); ok {
		n, err := h.Release(ctx, []string{"given-back"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = c.ReleaseClaimsOf(ctx, "a")
		require.NoError(t, err)
		require.Zero(t, n, "a claim given back is no longer a's")
		claim("", "given-back") // out of the way of the claims below
	} else {
		_, err := store.Remove(ctx, "given-back")
		require.NoError(t, err)
	}
	claim("a", "a1", "a2", "a3")
	claim("b", "b1")
	claim("", "plain")
	claim("a", "hidden", "parked", "released")
	if h, ok := store.(persistence.Handover); ok {
		// Hide takes over no live lease; release it first, as a poller that gave it up would.
		n, err := h.Release(ctx, []string{"hidden", "released"})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		hidden, err := h.Hide(ctx, now, persistence.MinDue, 1, mark(1))
		require.NoError(t, err)
		require.Equal(t, []string{"hidden"}, idsOf(hidden))
	} else {
		_, err := store.Remove(ctx, "hidden")
		require.NoError(t, err)
		_, err = store.Remove(ctx, "released")
		require.NoError(t, err)
	}
	if p, ok := store.(persistence.Parker); ok {
		mustPark(t, p, "parked", "reason")
	} else {
		_, err := store.Remove(ctx, "parked")
		require.NoError(t, err)
	}
	if _, ok := store.(persistence.Handover); ok {
		// "released" is pending again; hand it out once more, untagged.
		ids, err := store.ClaimDue(ctx, now, 10, time.Hour)
		require.NoError(t, err)
		require.Equal(t, []string{"released"}, ids)
	}

	n, err := c.ReleaseClaimsOf(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 3, n, "a's three live claims, not b's, not the untagged, hidden or parked ones")
	ids, err := store.ClaimDue(ctx, now, 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"a1", "a2", "a3"}, ids, "claimable again at once")
	n, err = c.ReleaseClaimsOf(ctx, "a")
	require.NoError(t, err)
	require.Zero(t, n, "claimed since without an instance: no longer a's")
	n, err = c.ReleaseClaimsOf(ctx, "nobody")
	require.NoError(t, err)
	require.Zero(t, n)
	if _, ok := store.(persistence.Parker); ok {
		got, err := store.Peek(ctx, "parked")
		require.NoError(t, err)
		require.Equal(t, "reason", got.Parked, "a parked timeout stays parked")
	}

	n, err = c.ReleaseClaimsOf(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ids, err = store.ClaimDue(ctx, now, 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"b1"}, ids)

	_, err = c.ClaimDueAs(ctx, "", now, 1, time.Hour)
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "an empty instance name")
	_, err = c.ReleaseClaimsOf(ctx, strings.Repeat("x", persistence.MaxIDLength+1))
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "a name too long")
}

func (s suite) testLeaseRunOutClearsTheTag(t *testing.T) {
	store, c := s.claimer(t)
	ctx := t.Context()
	now := base()
	mustStore(ctx, t, store, timeout("a", now), timeout("b", now))
	ids, err := c.ClaimDueAs(ctx, "crashed", now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, ids)
	// The lease runs out and another poller claims "a": it is no longer the crashed instance's.
	ids, err = store.ClaimDue(ctx, now.Add(time.Minute), 1, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
	ids, err = c.ClaimDueAs(ctx, "other", now.Add(time.Minute), 1, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, ids)
	n, err := c.ReleaseClaimsOf(ctx, "crashed")
	require.NoError(t, err)
	require.Zero(t, n, "both were claimed again since")
	ids, err = store.ClaimDue(ctx, now.Add(2*time.Minute), 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, ids, "their new claims are untouched")
}

func (s suite) testHoldInstance(t *testing.T) {
	_, c := s.claimer(t)
	ctx := t.Context()
	release, err := c.HoldInstance(ctx, "orders-1")
	require.NoError(t, err)
	_, err = c.HoldInstance(ctx, "orders-1")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse, "held already")
	require.ErrorContains(t, err, "orders-1", "the error names the instance")
	other, err := c.HoldInstance(ctx, "orders-2")
	require.NoError(t, err, "another name is another hold")
	require.NoError(t, release())
	require.NoError(t, release(), "releasing twice is harmless")
	again, err := c.HoldInstance(ctx, "orders-1")
	require.NoError(t, err, "free again once released")
	require.NoError(t, again())
	require.NoError(t, other())
	_, err = c.HoldInstance(ctx, "")
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "an empty instance name")
	// A hold not released is released by Close, which the suite calls.
	_, err = c.HoldInstance(ctx, "orders-3")
	require.NoError(t, err)
}
