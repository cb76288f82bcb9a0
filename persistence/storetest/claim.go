package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func (s suite) testPastDueClaimableAtOnce(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	mustStore(ctx, t, store,
		timeout("an-hour-ago", now.Add(-time.Hour)),
		timeout("a-microsecond-ago", now.Add(-time.Microsecond)),
		timeout("now", now),
		timeout("years-ago", now.AddDate(-20, 0, 0)),
	)
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"years-ago", "an-hour-ago", "a-microsecond-ago", "now"}, ids)
}

func (s suite) testNothingClaimableBeforeDue(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	mustStore(ctx, t, store, timeout("in-a-second", now.Add(time.Second)))

	for _, at := range []time.Time{now, now.Add(time.Second - time.Microsecond)} {
		ids, err := store.ClaimDue(ctx, at, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, ids, "claimed at %s, before it is due", at.Sub(now))
	}
	ids, err := store.ClaimDue(ctx, now.Add(time.Second), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"in-a-second"}, ids, "claimable the moment it is due")
}

func (s suite) testClaimDueLimitAndOrder(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	const n = 10
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("t%02d", i)
	}
	// Stored out of order, so that insertion order cannot pass for due order.
	for _, i := range rand.Perm(n) {
		mustStore(ctx, t, store, timeout(want[i], now.Add(time.Duration(i-n)*time.Minute)))
	}
	// Not yet due: never in the claims below.
	mustStore(ctx, t, store, timeout("later", now.Add(time.Hour)))

	var got []string
	for _, limit := range []int{1, 3, 4, 5} {
		ids, err := store.ClaimDue(ctx, now, limit, time.Minute)
		require.NoError(t, err)
		wantBatch := want[len(got):min(len(got)+limit, n)]
		require.Equal(t, wantBatch, ids, "ClaimDue(limit %d) after %d claimed", limit, len(got))
		got = append(got, ids...)
	}
	ids, err := store.ClaimDue(ctx, now, 5, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids, "everything due is claimed")
}

func (s suite) testLeaseExcludesOtherClaimers(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	const lease = time.Minute
	mustStore(ctx, t, store, timeout("a", now), timeout("b", now))

	ids, err := store.ClaimDue(ctx, now, 1, lease)
	require.NoError(t, err)
	require.Len(t, ids, 1)
	claimed := ids[0]
	other := map[string]string{"a": "b", "b": "a"}[claimed]

	ids, err = store.ClaimDue(ctx, now, 10, lease)
	require.NoError(t, err)
	require.Equal(t, []string{other}, ids, "a claimed id is not claimed again while its lease runs")

	for _, at := range []time.Time{now.Add(lease / 2), now.Add(lease - time.Microsecond)} {
		ids, err = store.ClaimDue(ctx, at, 10, lease)
		require.NoError(t, err)
		require.Empty(t, ids, "claimed again %s into a %s lease", at.Sub(now), lease)
	}

	// A lost dispatcher message is recovered when the lease runs out.
	ids, err = store.ClaimDue(ctx, now.Add(lease), 10, lease)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b"}, ids, "claimable again when the lease ends")

	ids, err = store.ClaimDue(ctx, now.Add(lease+lease/2), 10, lease)
	require.NoError(t, err)
	require.Empty(t, ids, "a renewed claim runs its own lease")
}

func (s suite) testNext(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	requireNext := func(want time.Time, msg string) {
		t.Helper()
		got, ok, err := store.Next(ctx)
		require.NoError(t, err)
		require.True(t, ok, msg)
		require.True(t, want.Equal(got), "%s: Next want %s, got %s", msg, want, got)
	}

	mustStore(ctx, t, store, timeout("late", now.Add(time.Hour)), timeout("early", now.Add(time.Second)))
	requireNext(now.Add(time.Second), "earliest due time")

	ids, err := store.ClaimDue(ctx, now.Add(time.Second), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"early"}, ids)
	requireNext(now.Add(time.Second+time.Minute), "end of the claim's lease")

	mustStore(ctx, t, store, timeout("sooner", now.Add(30*time.Second)))
	requireNext(now.Add(30*time.Second), "a new earlier timeout")

	removed, err := store.Remove(ctx, "early")
	require.NoError(t, err)
	require.True(t, removed)
	cancelled, err := store.Cancel(ctx, "sooner")
	require.NoError(t, err)
	require.True(t, cancelled)
	requireNext(now.Add(time.Hour), "after the earlier ones are gone")

	removed, err = store.Remove(ctx, "late")
	require.NoError(t, err)
	require.True(t, removed)
	_, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.False(t, ok, "Next once everything is removed")
}
