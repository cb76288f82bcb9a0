package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// testCountOwners: CountOwners counts every pending timeout by owner, exactly: the top owners
// most first, ties by owner, claimed and parked ones counted, removed and cancelled ones not, and
// those without an owner apart; the limit cuts the list, never the counts.
func (s suite) testCountOwners(t *testing.T) {
	store, ctx := s.setup(t)
	counter, ok := store.(persistence.OwnerCounter)
	if !ok {
		t.Skipf("%T does not implement persistence.OwnerCounter", store)
	}
	if _, err := counter.CountOwners(ctx, 1); errors.Is(err, persistence.ErrUnsupported) {
		t.Skipf("%T's CountOwners returns ErrUnsupported, as its docs say", store)
	}
	empty, err := counter.CountOwners(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, persistence.OwnerCounts{Top: []persistence.OwnerCount{}}, empty, "an empty store")

	now := base()
	owners := map[string]int{"order-a": 5, "order-b": 3, "order-c": 3, "order-d": 1, "": 4}
	for owner, n := range owners {
		for i := range n {
			to := timeout(fmt.Sprintf("owned-%s-%d", owner, i), now.Add(time.Duration(i-2)*time.Minute))
			to.Owner = owner
			_, err := store.Store(ctx, to)
			require.NoError(t, err)
		}
	}
	// Claimed and parked timeouts are pending: they count.
	_, err = store.ClaimDue(ctx, now, 3, time.Hour)
	require.NoError(t, err)
	if parker, ok := store.(persistence.Parker); ok {
		parkedOK, err := parker.Park(ctx, "owned-order-a-4", "count owners test")
		require.NoError(t, err)
		require.True(t, parkedOK)
	}
	// Removed and cancelled ones do not.
	removed, err := store.Remove(ctx, "owned-order-b-0")
	require.NoError(t, err)
	require.True(t, removed)
	n, err := store.CancelByOwner(ctx, "order-d")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	got, err := counter.CountOwners(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, persistence.OwnerCounts{NoOwner: 4, Top: []persistence.OwnerCount{
		{Owner: "order-a", Count: 5}, {Owner: "order-c", Count: 3}, {Owner: "order-b", Count: 2},
	}}, got)

	got, err = counter.CountOwners(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, persistence.OwnerCounts{NoOwner: 4, Top: []persistence.OwnerCount{{Owner: "order-a", Count: 5}}}, got)

	got, err = counter.CountOwners(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, persistence.OwnerCounts{NoOwner: 4, Top: []persistence.OwnerCount{}}, got)
}
