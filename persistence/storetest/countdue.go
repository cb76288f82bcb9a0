package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// testCountDue: CountDue counts the timeouts due strictly before each bound, exactly: one due at
// a bound is not counted for it, claimed ones are, parked ones are not; bounds come in any
// order, repeated or not to the microsecond, and one out of range is refused.
func (s suite) testCountDue(t *testing.T) {
	store, ctx := s.setup(t)
	counter, ok := store.(persistence.DueCounter)
	if !ok {
		t.Skipf("%T does not implement persistence.DueCounter", store)
	}
	now := base()
	if _, err := counter.CountDue(ctx, []time.Time{now}); errors.Is(err, persistence.ErrUnsupported) {
		t.Skipf("%T's CountDue returns ErrUnsupported, as its docs say", store)
	}
	offsets := []time.Duration{-2 * time.Hour, -time.Minute, -time.Minute, 0, 0, time.Microsecond,
		time.Minute, time.Minute, time.Minute + time.Microsecond, 59 * time.Minute, 2 * time.Hour, 48 * time.Hour}
	dues := make(map[string]time.Time, len(offsets))
	for i, d := range offsets {
		id := fmt.Sprintf("due-%02d", i)
		dues[id] = now.Add(d)
		_, err := store.Store(ctx, timeout(id, now.Add(d)))
		require.NoError(t, err)
	}
	// Claimed ones count: they are pending until delivered.
	claimed, err := store.ClaimDue(ctx, now, 3, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	parked := map[string]bool{}
	if parker, ok := store.(persistence.Parker); ok {
		for _, id := range []string{"due-01", "due-07"} { // one overdue, one due at now+1m
			ok, err := parker.Park(ctx, id, "count due test")
			require.NoError(t, err)
			require.True(t, ok)
			parked[id] = true
		}
	}
	want := func(bound time.Time) int {
		n := 0
		for id, due := range dues {
			if due.Before(bound) && !parked[id] {
				n++
			}
		}
		return n
	}

	bounds := []time.Time{
		now.Add(time.Hour),
		now, // two due at now: not before it
		now.Add(time.Microsecond),
		now.Add(time.Minute), // three due at now+1m: not before it
		now.Add(time.Minute + 500*time.Nanosecond),
		now.Add(time.Minute + time.Microsecond),
		now.Add(time.Minute), // again
		now.Add(-3 * time.Hour),
		now.Add(7 * 24 * time.Hour),
	}
	counts, err := counter.CountDue(ctx, bounds)
	require.NoError(t, err)
	require.Len(t, counts, len(bounds))
	for i, b := range bounds {
		require.Equal(t, want(b), counts[i], "due before now%+v", b.Sub(now))
	}
	require.Equal(t, 0, counts[7], "none before the earliest")
	require.Equal(t, len(offsets)-len(parked), counts[8], "every one not parked")
	require.Equal(t, counts[5], counts[4], "a bound between microseconds counts as the next microsecond")
	require.Equal(t, counts[3], counts[6], "a bound repeated")

	// What changes is counted at the next call.
	removed, err := store.Remove(ctx, claimed[0])
	require.NoError(t, err)
	require.True(t, removed)
	delete(dues, claimed[0])
	counts, err = counter.CountDue(ctx, []time.Time{now.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, []int{want(now.Add(time.Hour))}, counts)

	counts, err = counter.CountDue(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, counts)
	for _, b := range []time.Time{persistence.MinDue.Add(-time.Microsecond), persistence.MaxDue.Add(time.Microsecond)} {
		_, err = counter.CountDue(ctx, []time.Time{now, b})
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "bound %s", b)
	}
	counts, err = counter.CountDue(ctx, []time.Time{persistence.MinDue, persistence.MaxDue})
	require.NoError(t, err)
	require.Equal(t, []int{0, len(dues) - len(parked)}, counts)
}
