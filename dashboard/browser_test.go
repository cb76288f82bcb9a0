package dashboard_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/internal/browser"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// TestBrowserActsThroughTheButtons drives the dashboard in headless Chromium, as a person would:
// it finds timeouts by owner, pastes the token, and reschedules, delivers and cancels through the
// buttons and their confirmation dialog. acceptance/dashboard_browser_test.go does the same on
// the service over RabbitMQ and PostgreSQL.
func TestBrowserActsThroughTheButtons(t *testing.T) {
	chromium := testenv.Chromium(t)
	b := setup(t, dashboard.Config{Token: token})
	delivered, err := b.pubSub.Subscribe(context.Background(), "billing")
	require.NoError(t, err)
	b.schedule(t, "move-me", "billing", time.Hour, "order-7", "")
	b.schedule(t, "drop-me", "billing", time.Hour, "order-7", "")
	b.schedule(t, "send-me", "billing", 2*time.Hour, "order-8", "")
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 3*browser.Timeout)
	defer cancel()
	tab, closeBrowser, err := browser.Start(ctx, chromium, 1440, 900)
	require.NoError(t, err)
	defer closeBrowser()

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(srv.URL+"/?owner=order-7"), browser.SetToken(token)))
	pending, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`#pending`)))
	require.NoError(t, err)
	require.Equal(t, "3", pending)

	result, err := browser.Act(tab, "move-me", "reschedule", "3h")
	require.NoError(t, err)
	require.Contains(t, result, "Rescheduled move-me")
	got, err := b.manager.Get(context.Background(), "move-me")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(3*time.Hour), got.Due, time.Minute)

	result, err = browser.Act(tab, "drop-me", "cancel", "")
	require.NoError(t, err)
	require.Contains(t, result, "Cancelled drop-me")
	_, err = b.manager.Get(context.Background(), "drop-me")
	require.ErrorIs(t, err, persistence.ErrNotFound)

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(srv.URL+"/timeouts/send-me")))
	result, err = browser.Act(tab, "send-me", "deliver", "")
	require.NoError(t, err)
	require.Contains(t, result, "send-me")
	select {
	case msg := <-delivered:
		msg.Ack()
		require.Equal(t, "send-me", msg.UUID)
	case <-time.After(30 * time.Second):
		t.Fatal("deliver now did not deliver")
	}
	require.Eventually(t, func() bool {
		_, err := b.manager.Get(context.Background(), "send-me")
		return errors.Is(err, persistence.ErrNotFound)
	}, 10*time.Second, 20*time.Millisecond)

	// Parked timeouts: listed with their reason, replayed and deleted through their buttons.
	b.park(t, "replay-me", refusal)
	b.park(t, "delete-me", refusal)
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(srv.URL+"/?parked=true")))
	parked, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`#parked`)))
	require.NoError(t, err)
	require.Equal(t, "2", parked)
	result, err = browser.Act(tab, "replay-me", "replay", "")
	require.NoError(t, err)
	require.Contains(t, result, "Replayed replay-me")
	got, err = b.manager.Get(context.Background(), "replay-me")
	require.NoError(t, err)
	require.Empty(t, got.Parked)
	result, err = browser.Act(tab, "delete-me", "delete", "")
	require.NoError(t, err)
	require.Contains(t, result, "Deleted delete-me")
	_, err = b.manager.Get(context.Background(), "delete-me")
	require.ErrorIs(t, err, persistence.ErrNotFound)

	// A wrong token shows the API's refusal in the dialog and changes nothing.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"), browser.SetToken("not-the-token-at-all")))
	_, err = browser.Act(tab, "move-me", "cancel", "")
	require.ErrorContains(t, err, "forbidden: the token is wrong", "the dialog shows the refusal")
	_, err = b.manager.Get(context.Background(), "move-me")
	require.NoError(t, err)
}
