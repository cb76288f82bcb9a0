package dashboard_test

import (
	"fmt"
	"html"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
)

// card returns the number the overview's card labelled label shows, as text.
func card(t *testing.T, page, label string) string {
	t.Helper()
	m := regexp.MustCompile(`<div class="k">` + regexp.QuoteMeta(label) + `</div>\s*<div class="n">([^<]*)</div>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no card %q in the page", label)
	return html.UnescapeString(m[1])
}

func TestWindowsAndOwnersAreExactOnAStoreThatCountsThem(t *testing.T) {
	t.Parallel()
	// The memory store counts due timeouts and owners (persistence.DueCounter and OwnerCounter);
	// a sample of 3 holds only the 30s, 30s and 10m ones, so what reaches beyond 10m can only
	// come from the counts.
	b := setup(t, dashboard.Config{SampleSize: 3})
	scheduleSpread(t, b)
	b.park(t, "parked-1h", "refused") // parked: in Pending and Parked, in no window

	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.True(t, st.Partial)
	require.Equal(t, 7, st.Pending)
	got := map[string][4]any{}
	for _, w := range st.Due {
		got[w.Label] = [4]any{w.Count, w.Exact, w.AtLeast, w.AtMost}
	}
	require.Equal(t, map[string][4]any{
		"due now":     {0, true, false, false},
		"next minute": {2, true, false, false},
		"next hour":   {1, true, false, false},
		"next day":    {1, true, false, false},
		"later":       {2, true, false, false},
	}, got)
	hist := map[string][4]any{}
	for _, w := range st.DueHistogram {
		hist[w.Label] = [4]any{w.Count, w.Exact, w.AtLeast, w.AtMost}
	}
	// Every bar, the week and beyond included.
	require.Equal(t, map[string][4]any{
		"overdue": {0, true, false, false},
		"<1m":     {2, true, false, false},
		"1–5m":    {0, true, false, false},
		"5–15m":   {1, true, false, false},
		"15m–1h":  {0, true, false, false},
		"1–6h":    {1, true, false, false},
		"6–24h":   {0, true, false, false},
		"1–7d":    {2, true, false, false},
		">7d":     {0, true, false, false},
	}, hist)
	// The owners beyond the sample too: order-3's two are due in 3 days, and the parked one
	// counts.
	require.True(t, st.ByOwner.Exact)
	require.True(t, st.ByOwner.Complete)
	require.Equal(t, []named{{"order-1", 2}, {"order-3", 2}, {"order-2", 1}}, st.ByOwner.Owners)
	require.Equal(t, 2, st.ByOwner.NoOwner)

	// The page marks no estimate, and says the owners are exact.
	page := b.get(t, "/").body
	for label, want := range map[string]string{"due now": "0", "next minute": "2", "next hour": "1", "next day": "1", "later": "2"} {
		require.Equal(t, want, card(t, page, label), label)
	}
	require.NotContains(t, page, "beyond the sample")
	require.NotContains(t, page, "earliest due.")
	require.Contains(t, page, "Exact counts of every pending timeout.")
}

func TestOwnersAreEstimatedOnAStoreThatCannotCountThem(t *testing.T) {
	t.Parallel()
	store := memory.New().(parkerStore)
	b := setupOn(t, dashboard.Config{SampleSize: 3}, sampledStore{store, store.(persistence.Inspector), store.(persistence.Scheduler)}, nil)
	scheduleSpread(t, b)
	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.False(t, st.ByOwner.Exact)
	require.False(t, st.ByOwner.Complete)
	require.Equal(t, []named{{"order-1", 2}, {"order-2", 1}}, st.ByOwner.Owners, "the sample's")
	require.Contains(t, b.get(t, "/").body, "Among the 3 earliest due.")
}

func TestWindowsAreExactWhenTheSampleHoldsEverything(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	scheduleSpread(t, b)
	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.False(t, st.Partial)
	for _, w := range append(st.Due, st.DueHistogram...) {
		require.True(t, w.Exact, "%+v", w)
		require.False(t, w.AtLeast || w.AtMost, "%+v", w)
	}
	page := b.get(t, "/").body
	require.NotContains(t, page, "beyond the sample")
}

// storeLater stores n timeouts due 1 to n hours from now, and records a failed forward for the
// first failing of them.
func storeLater(t *testing.T, store persistence.Store, n, failing int) {
	t.Helper()
	ctx := t.Context()
	for i := range n {
		id := fmt.Sprintf("later-%03d", i)
		_, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "billing", Owner: fmt.Sprintf("order-%d", i%7), Due: time.Now().Add(time.Duration(i+1) * time.Hour)})
		require.NoError(t, err)
		if i < failing {
			ok, err := store.IncrementFailureCount(ctx, id)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
}

func TestTheSampleCountsOnlyFailuresWhenTheStoreCountsTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	storeLater(t, b.store, 150, 2)
	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.Equal(t, 100, st.Sampled, "the earliest 100, not the 10,000 of SampleSize")
	require.True(t, st.Partial)
	require.Equal(t, 2, st.Failing)
	require.True(t, st.ByOwner.Exact)
	require.Equal(t, named{"order-0", 22}, st.ByOwner.Owners[0], "counted beyond the sample")
	for _, w := range append(st.Due, st.DueHistogram...) {
		require.True(t, w.Exact, "%+v", w)
	}
	require.Contains(t, b.get(t, "/").body, "among the 100 earliest due (an estimate)")
}

// ownersOnlyStore counts owners but not due timeouts.
type ownersOnlyStore struct {
	sampledStore
	persistence.OwnerCounter
}

func TestTheWindowsGetTheWholeSampleWhenTheStoreCountsOnlyOwners(t *testing.T) {
	t.Parallel()
	store := memory.New().(parkerStore)
	b := setupOn(t, dashboard.Config{}, ownersOnlyStore{sampledStore{store, store.(persistence.Inspector), store.(persistence.Scheduler)},
		store.(persistence.OwnerCounter)}, nil)
	storeLater(t, b.store, 150, 0)
	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.Equal(t, 150, st.Sampled)
	require.False(t, st.Partial)
	require.True(t, st.ByOwner.Exact)
	for _, w := range append(st.Due, st.DueHistogram...) {
		require.True(t, w.Exact, "%+v", w)
	}
}
