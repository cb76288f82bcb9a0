package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/internal/browser"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// memoryStore is the memory store with the optional interfaces it implements.
type memoryStore interface {
	parkerStore
	persistence.Inspector
	persistence.BatchStore
	persistence.Releaser
	persistence.Claimer
	persistence.Scheduler
	persistence.Handover
}

// clockedMemory is the memory store with a clock of its own, as a database server has: the
// system clock. A manager measures its offset to it.
type clockedMemory struct{ memoryStore }

func (clockedMemory) Now(context.Context) (time.Time, error) { return time.Now(), nil }

var _ persistence.Clocked = clockedMemory{}

// shiftedClock is the system clock shifted by an offset: a host whose clock is wrong.
type shiftedClock time.Duration

func (c shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// setupClocked runs a manager whose clock is shift off the store's, and waits for its first
// measurement of the offset.
func setupClocked(t *testing.T, shift time.Duration) *testBundle {
	t.Helper()
	store := clockedMemory{memory.New().(memoryStore)}
	b := setupOn(t, dashboard.Config{}, store, func(c *timeouts.Config) { c.Clock = shiftedClock(shift) })
	require.Eventually(t, func() bool { return b.manager.ClockOffset().Measured }, 10*time.Second, 10*time.Millisecond,
		"the manager measures its offset to the store's clock")
	return b
}

// TestClockSkewIsShownWithItsAlarm: a manager whose clock runs 3 s ahead of its store's shows the
// offset in the API and the overview, with the alarm: a banner and the health row.
func TestClockSkewIsShownWithItsAlarm(t *testing.T) {
	t.Parallel()
	b := setupClocked(t, 3*time.Second)

	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.True(t, st.Clock.Measured)
	require.InDelta(t, -3, st.Clock.Offset, 0.25, "the store's clock minus the manager's")
	require.GreaterOrEqual(t, st.Clock.Error, 0.0)
	require.Less(t, st.Clock.Error, 0.25, "half the round trip to an in-process store")
	require.NotNil(t, st.Clock.At)
	require.True(t, st.Clock.Alarm, "3 s is above the default alarm of 1 s")

	r := b.get(t, "/")
	require.Equal(t, http.StatusOK, r.status, r.body)
	for _, want := range []string{`id="clock-alarm"`, "This instance's clock is 3s ahead of the store&#39;s (± ",
		"beyond the skew alarm", `<span class="pill bad">skewed</span>`} {
		require.Contains(t, r.body, want)
	}
}

// TestClockInStepShowsNoAlarm: a manager on the store's clock shows a measured offset near 0 and
// no alarm.
func TestClockInStepShowsNoAlarm(t *testing.T) {
	t.Parallel()
	b := setupClocked(t, 0)

	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.True(t, st.Clock.Measured)
	require.InDelta(t, 0, st.Clock.Offset, 0.25)
	require.False(t, st.Clock.Alarm)

	r := b.get(t, "/")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.NotContains(t, r.body, `id="clock-alarm"`)
	require.Contains(t, r.body, `<span class="pill good">in step</span>`)
	require.Contains(t, r.body, "the store&#39;s (± ")
}

// TestClockOfAStoreWithoutOneIsNotMeasured: the memory store has no clock of its own, so the
// manager's is the store's and nothing is measured, whatever the manager's clock says.
func TestClockOfAStoreWithoutOneIsNotMeasured(t *testing.T) {
	t.Parallel()
	b := setupOn(t, dashboard.Config{}, memory.New().(parkerStore), func(c *timeouts.Config) { c.Clock = shiftedClock(time.Hour) })

	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.False(t, st.Clock.Measured)
	require.Zero(t, st.Clock.Offset)
	require.Nil(t, st.Clock.At)
	require.False(t, st.Clock.Alarm)

	r := b.get(t, "/")
	require.NotContains(t, r.body, `id="clock-alarm"`)
	require.Contains(t, r.body, "not measured: a store without a clock of its own (memory, SQLite) goes by this process&#39;s")
}

// TestBrowserShowsTheClockAlarm loads the overview of a manager whose clock runs 3 s ahead of its
// store's in headless Chromium: the banner and the health row say so.
func TestBrowserShowsTheClockAlarm(t *testing.T) {
	chromium := testenv.Chromium(t)
	b := setupClocked(t, 3*time.Second)
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 3*browser.Timeout)
	defer cancel()
	tab, closeBrowser, err := browser.Start(ctx, chromium, 1440, 900)
	require.NoError(t, err)
	defer closeBrowser()
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(srv.URL+"/")))
	banner, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`#clock-alarm`)))
	require.NoError(t, err)
	require.Contains(t, banner, "This instance's clock is 3s ahead of the store's")
	row, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`#clock-offset`)))
	require.NoError(t, err)
	require.Contains(t, row, "skewed")
	require.Contains(t, row, "3s ahead of the store's")
}
