// Command screenshot renders the dashboard in headless Chromium and writes docs/dashboard.png:
// `make screenshot`. The endpoint it shows runs on the memory store and a GoChannel with a
// made-up workload: deliveries first (for the lateness plot), then a spread of pending timeouts,
// a few of them overdue.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/chromedp/chromedp"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/internal/browser"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

func main() {
	out := flag.String("out", "docs/dashboard.png", "where to write the PNG")
	chromium := flag.String("chromium", "/usr/bin/chromium", "the Chromium binary")
	flag.Parse()
	if err := run(*out, *chromium); err != nil {
		fmt.Fprintln(os.Stderr, "screenshot:", err)
		os.Exit(1)
	}
}

var destinations = []string{"payments.reminders", "orders.expire", "shipping.follow-up", "invoices.dunning", "carts.abandoned"}

func run(out, chromium string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 4096, BlockPublishUntilSubscriberAck: true}, logger)
	store := memory.New()
	manager, err := timeouts.NewManager(timeouts.Config{Endpoint: "orders", Store: store, Publisher: pubSub, Subscriber: pubSub}, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		return err
	}
	if err := manager.AddToRouter(router); err != nil {
		return err
	}
	for _, d := range destinations {
		router.AddConsumerHandler("consume-"+d, d, pubSub, func(*message.Message) error { return nil })
	}
	runCtx, stopRouter := context.WithCancel(ctx)
	defer stopRouter()
	go func() { _ = router.Run(runCtx) }()
	<-manager.Ready()

	// Deliveries: spread over a few seconds, so that lateness has a shape.
	rng := rand.New(rand.NewPCG(7, 19))
	const delivered = 400
	for i := range delivered {
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order": 1}`))
		timeouts.DeliverAfter(msg, time.Duration(rng.IntN(3000))*time.Millisecond)
		if _, err := manager.Schedule(ctx, destinations[i%len(destinations)], msg); err != nil {
			return err
		}
	}
	for manager.Activity().Dispatched < delivered {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopRouter()
	<-manager.Done()

	// What is pending: stored beside the stopped manager, so the overdue ones stay overdue.
	now := time.Now()
	spread := []struct {
		n        int
		from, to time.Duration
	}{
		{7, -4 * time.Minute, -10 * time.Second},
		{46, 5 * time.Second, time.Minute},
		{180, time.Minute, time.Hour},
		{420, time.Hour, 24 * time.Hour},
		{260, 24 * time.Hour, 14 * 24 * time.Hour},
	}
	n := 0
	for _, s := range spread {
		for range s.n {
			n++
			due := now.Add(s.from + time.Duration(rng.Int64N(int64(s.to-s.from))))
			t := persistence.Timeout{
				ID:          fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Int64N(1<<48)),
				Destination: destinations[zipf(rng, len(destinations))], Due: due,
				Payload:  []byte(fmt.Sprintf(`{"order": %d, "reason": "payment window closes"}`, 10_000+n)),
				Metadata: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			}
			if rng.IntN(10) < 8 {
				t.Owner = fmt.Sprintf("order-%d", 10_000+zipf(rng, 40)*37)
			}
			if _, err := store.Store(ctx, t); err != nil {
				return err
			}
			if rng.IntN(60) == 0 {
				_, _ = store.IncrementFailureCount(ctx, t.ID)
			}
		}
	}

	h, err := dashboard.New(manager, dashboard.Config{Token: "screenshot-token-0123456789"})
	if err != nil {
		return err
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tab, closeBrowser, err := browser.Start(ctx, chromium, 1440, 1300)
	if err != nil {
		return err
	}
	defer closeBrowser()
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#timeouts`))); err != nil {
		return err
	}
	png, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	if err != nil {
		return err
	}
	return os.WriteFile(out, png, 0o644)
}

// zipf picks 0..n-1, the low ones more often, as real workloads are lopsided.
func zipf(rng *rand.Rand, n int) int {
	for i := range n - 1 {
		if rng.IntN(3) > 0 {
			return i
		}
	}
	return n - 1
}
