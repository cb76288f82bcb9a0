package dashboard_test

import (
	"html"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dashboard"
)

// card returns the number the overview's card labelled label shows, as text.
func card(t *testing.T, page, label string) string {
	t.Helper()
	m := regexp.MustCompile(`<div class="k">` + regexp.QuoteMeta(label) + `</div>\s*<div class="n">([^<]*)</div>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no card %q in the page", label)
	return html.UnescapeString(m[1])
}

func TestWindowsWithinADayAreExactOnAStoreThatCountsThem(t *testing.T) {
	t.Parallel()
	// The memory store counts due timeouts (persistence.DueCounter); a sample of 3 holds only
	// the 30s, 30s and 10m ones, so what reaches beyond 10m can only come from the counts.
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
	// Within a day, exact; the week beyond is estimated from the sample, which ends at 10m.
	require.Equal(t, map[string][4]any{
		"overdue": {0, true, false, false},
		"<1m":     {2, true, false, false},
		"1–5m":    {0, true, false, false},
		"5–15m":   {1, true, false, false},
		"15m–1h":  {0, true, false, false},
		"1–6h":    {1, true, false, false},
		"6–24h":   {0, true, false, false},
		"1–7d":    {0, false, true, false},
		">7d":     {2, false, false, true},
	}, hist)

	// The page marks the estimates, and only them.
	page := b.get(t, "/").body
	for label, want := range map[string]string{"due now": "0", "next minute": "2", "next hour": "1", "next day": "1", "later": "2"} {
		require.Equal(t, want, card(t, page, label), label)
	}
	require.Contains(t, page, "1–7d: 0 pending or more (beyond the sample)")
	require.Contains(t, page, "&gt;7d: 2 pending or fewer (beyond the sample)")
	require.NotContains(t, page, "1–6h: 1 pending or")
	require.NotContains(t, page, "6–24h: 0 pending or")
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
