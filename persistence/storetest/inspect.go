package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

func (s suite) testInspector(t *testing.T) {
	store, ctx := s.setup(t)
	inspector, ok := store.(persistence.Inspector)
	if !ok {
		t.Skipf("%T does not implement persistence.Inspector", store)
	}
	now := base()

	stats, err := inspector.Stats(ctx, now)
	require.NoError(t, err)
	require.Zero(t, stats.Pending, "Stats of an empty store: Pending")
	require.True(t, stats.Earliest.IsZero(), "Stats of an empty store: Earliest %s", stats.Earliest)
	require.True(t, stats.Latest.IsZero(), "Stats of an empty store: Latest %s", stats.Latest)
	list, err := inspector.List(ctx, persistence.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, list, "List of an empty store")

	owned := func(id string, minutes int, owner string) persistence.Timeout {
		to := timeout(id, now.Add(time.Duration(minutes)*time.Minute))
		to.Owner = owner
		return to
	}
	stored := []persistence.Timeout{
		owned("m5", 5, "a"), owned("m1", 1, "a"), owned("m3", 3, ""), owned("m2", 2, "b"), owned("m4", 4, ""),
	}
	mustStore(ctx, t, store, stored...)
	byID := make(map[string]persistence.Timeout, len(stored))
	for _, to := range stored {
		byID[to.ID] = to
	}

	// A claimed timeout is still pending until it is removed.
	ids, err := store.ClaimDue(ctx, now.Add(time.Minute), 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"m1"}, ids)

	stats, err = inspector.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 5, stats.Pending)
	require.True(t, now.Add(time.Minute).Equal(stats.Earliest), "Earliest: got %s", stats.Earliest)
	require.True(t, now.Add(5*time.Minute).Equal(stats.Latest), "Latest: got %s", stats.Latest)

	requireList := func(opts persistence.ListOptions, want ...string) {
		t.Helper()
		got, err := inspector.List(ctx, opts)
		require.NoError(t, err)
		gotIDs := make([]string, len(got))
		for i, to := range got {
			gotIDs[i] = to.ID
			w := byID[to.ID]
			require.Equal(t, w.Destination, to.Destination, "%s: Destination", to.ID)
			require.Equal(t, w.Owner, to.Owner, "%s: Owner", to.ID)
			require.True(t, w.Due.Equal(to.Due), "%s: Due want %s, got %s", to.ID, w.Due, to.Due)
			require.Empty(t, to.Payload, "%s: List returns no payloads", to.ID)
		}
		if len(want) == 0 {
			require.Empty(t, gotIDs, "List(%+v)", opts)
			return
		}
		require.Equal(t, want, gotIDs, "List(%+v)", opts)
	}
	requireList(persistence.ListOptions{}, "m1", "m2", "m3", "m4", "m5")
	requireList(persistence.ListOptions{Limit: 2}, "m1", "m2")
	requireList(persistence.ListOptions{Owner: "a"}, "m1", "m5")
	requireList(persistence.ListOptions{Owner: "a", Limit: 1}, "m1")
	requireList(persistence.ListOptions{Owner: "nobody"})

	// Limit defaults to 100.
	storeConcurrently(ctx, t, store, 100, 16, func(i int) persistence.Timeout {
		return timeout(fmt.Sprintf("x%03d", i), now.Add(time.Hour))
	})
	list, err = inspector.List(ctx, persistence.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list, 100, "List's default limit")
	stats, err = inspector.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 105, stats.Pending)
}
