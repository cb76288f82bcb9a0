package acceptance

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/browser"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// TestDashboardInABrowser runs `timeoutmill run --http` on RabbitMQ and PostgreSQL and drives its
// dashboard in headless Chromium: it loads the page, finds a scheduled timeout by its owner,
// reschedules it to a few seconds from now, and cancels another through the buttons and their
// confirmation dialog. The store then holds the rescheduled one at its new due time and not the
// cancelled one; the rescheduled one is delivered, not before its new due time, and the
// cancelled one never is, past its old due time. The clock row shows the service in step with
// PostgreSQL's clock, without the skew alarm.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	chromium := testenv.Chromium(t)
	amqpURL := testenv.AMQPURL(t)
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	const token = "acceptance-token-0123456789"
	endpoint := "dash-" + randomHex(t, 4)
	dest := endpoint + ".due"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	svc := startService(t, "dash", runArgs(endpoint, dsn, amqpURL, endpoint+".error",
		"--http", addr, "--http-token", token, "--poll-interval", "2s")...)

	pub, sub, err := amqptransport.New(amqptransport.Config{URL: amqpURL}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	arrivals, err := sub.Subscribe(ctx, dest)
	require.NoError(t, err)
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	go func() {
		for msg := range arrivals {
			mu.Lock()
			if _, seen := arrived[msg.UUID]; !seen {
				arrived[msg.UUID] = time.Now()
			}
			mu.Unlock()
			msg.Ack()
		}
	}()

	producer, err := timeouts.NewPublisher(pub, endpoint)
	require.NoError(t, err)
	send := func(owner string, after time.Duration) (string, time.Time) {
		msg := message.NewMessage(watermill.NewUUID(), []byte("from "+owner))
		due := time.Now().Add(after)
		timeouts.DeliverAt(msg, due)
		timeouts.WithOwner(msg, owner)
		require.NoError(t, producer.Publish(dest, msg))
		return msg.UUID, due
	}
	moved, _ := send("order-moved", time.Hour)
	cancelled, cancelledDue := send("order-cancelled", 60*time.Second)

	store, err := postgres.Open(ctx, postgres.Config{DSN: dsn, Endpoint: endpoint})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	require.Eventually(t, func() bool {
		_, err1 := store.Peek(ctx, moved)
		_, err2 := store.Peek(ctx, cancelled)
		return err1 == nil && err2 == nil
	}, time.Minute, 100*time.Millisecond, "the service stored both timeouts")

	tab, closeBrowser, err := browser.Start(ctx, chromium, 1440, 900)
	require.NoError(t, err)
	defer closeBrowser()
	base := "http://" + addr + "/"
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"?owner=order-moved"), browser.SetToken(token)))
	rescheduledAt := time.Now()
	result, err := browser.Act(tab, moved, "reschedule", "5s")
	require.NoError(t, err, svc.tail(30))
	require.Contains(t, result, "Rescheduled "+moved)
	got, err := store.Peek(ctx, moved)
	require.NoError(t, err)
	require.WithinDuration(t, rescheduledAt.Add(5*time.Second), got.Due, 30*time.Second, "the store has the new due time")
	newDue := got.Due

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"?owner=order-cancelled")))
	result, err = browser.Act(tab, cancelled, "cancel", "")
	require.NoError(t, err, svc.tail(30))
	require.Contains(t, result, "Cancelled "+cancelled)
	_, err = store.Peek(ctx, cancelled)
	require.True(t, errors.Is(err, persistence.ErrNotFound), "the store no longer holds the cancelled timeout: %v", err)

	// The rescheduled timeout is delivered at its new due time, not an hour from now.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := arrived[moved]
		return ok
	}, 2*time.Minute, 100*time.Millisecond, "the rescheduled timeout was not delivered")
	mu.Lock()
	at := arrived[moved]
	mu.Unlock()
	require.False(t, at.Before(newDue), "delivered at %s, before its new due time %s", at, newDue)

	// The cancelled one is never delivered: wait past its old due time and the next poll.
	time.Sleep(time.Until(cancelledDue.Add(5 * time.Second)))
	mu.Lock()
	_, delivered := arrived[cancelled]
	mu.Unlock()
	require.False(t, delivered, "the cancelled timeout was delivered")
	require.NotContains(t, svc.output(), token, "the log never shows the token")

	// The service measures its clock against PostgreSQL's, on this same host: in step, no alarm.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base)))
	clock, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`#clock-offset`)))
	require.NoError(t, err)
	require.Contains(t, clock, "in step")
	require.Contains(t, clock, "the store's (± ")
	alarm, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.getElementById("clock-alarm") !== null`))
	require.NoError(t, err)
	require.False(t, alarm, "no skew alarm on a clock in step with the store's")
}
