package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// testClocked checks a store's own clock (persistence.Clocked): in UTC, on the time scale of the
// due times it keeps (a time zone mistake is hours off this process's clock; a skew of seconds is
// what Clocked is for, and passes), and read when asked, not frozen at a transaction's start.
func (s suite) testClocked(t *testing.T) {
	store, ctx := s.setup(t)
	clocked, ok := store.(persistence.Clocked)
	if !ok {
		t.Skipf("%T does not implement persistence.Clocked", store)
	}
	first, err := clocked.Now(ctx)
	require.NoError(t, err)
	require.Equal(t, time.UTC, first.Location())
	require.InDelta(t, 0, time.Since(first).Hours(), 0.5, "the store's time %s is hours off this process's %s", first, time.Now().UTC())

	const pause = 50 * time.Millisecond
	time.Sleep(pause)
	second, err := clocked.Now(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, second.Sub(first), pause*9/10, "the store's clock did not advance")
	require.Less(t, second.Sub(first), time.Minute)

	// A timeout due at the store's time is due on its clock a moment later.
	due := first.Truncate(time.Microsecond)
	_, err = store.Store(ctx, persistence.Timeout{ID: "due-at-the-stores-time", Destination: "d", Due: due})
	require.NoError(t, err)
	ids, err := store.ClaimDue(ctx, second, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"due-at-the-stores-time"}, ids)
}
