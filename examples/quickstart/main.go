// Command quickstart shows timeoutmill with no server at all: Watermill's in-process GoChannel
// and the embedded SQLite store in a temporary directory.
//
// It schedules a handful of messages with delays between 0.5 s and 5 s and prints each as it is
// delivered, with how late it was. Then it stops, as a process would, and starts again on the
// same file: the timeouts scheduled before the stop are still delivered.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

const (
	endpoint = "quickstart"
	topic    = "reminders"
	// dueHeader is the example's own record of when it asked for delivery, to print lateness.
	dueHeader = "quickstart.due"
)

// delays of the scheduled messages; those above stopAfter are still pending at the stop.
var delays = []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second, 4 * time.Second, 5 * time.Second}

const stopAfter = 4 // deliveries seen before the first run stops

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "timeoutmill-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dbPath := filepath.Join(dir, "timeouts.db")
	fmt.Fprintf(out, "store: %s\n", dbPath)

	// First run: schedule everything, see the early ones delivered, then stop.
	first, err := startEndpoint(ctx, dbPath)
	if err != nil {
		return err
	}
	start := time.Now()
	for i, d := range delays {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("reminder %d", i+1)))
		due := time.Now().Add(d)
		msg.Metadata.Set(dueHeader, due.Format(time.RFC3339Nano))
		timeouts.DeliverAt(msg, due)
		if err := first.manager.Publisher().Publish(topic, msg); err != nil {
			return err
		}
		fmt.Fprintf(out, "scheduled %q in %s\n", msg.Payload, d)
	}
	if err := first.receive(ctx, out, stopAfter); err != nil {
		return err
	}
	if err := first.stop(); err != nil {
		return err
	}
	fmt.Fprintf(out, "stopped after %.1f s with %d timeouts still pending\n", time.Since(start).Seconds(), len(delays)-stopAfter)

	// Second run, on the same file: the pending timeouts survive the restart.
	second, err := startEndpoint(ctx, dbPath)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "restarted on the same store")
	if err := second.receive(ctx, out, len(delays)-stopAfter); err != nil {
		return err
	}
	if err := second.stop(); err != nil {
		return err
	}
	fmt.Fprintf(out, "all %d delivered, none early, in %.1f s\n", len(delays), time.Since(start).Seconds())
	return nil
}

// runningEndpoint is one "process": a store, a Pub/Sub, a router running the timeout manager,
// and a subscription to the destination topic.
type runningEndpoint struct {
	store      *sqlite.Store
	pubSub     *gochannel.GoChannel
	router     *message.Router
	manager    *timeouts.Manager
	deliveries <-chan *message.Message
	routerDone chan error
}

func startEndpoint(ctx context.Context, dbPath string) (*runningEndpoint, error) {
	store, err := sqlite.Open(ctx, sqlite.Config{Path: dbPath, Endpoint: endpoint})
	if err != nil {
		return nil, err
	}
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64, BlockPublishUntilSubscriberAck: true}, logger)
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint:   endpoint,
		Store:      store,
		Publisher:  pubSub,
		Subscriber: pubSub,
	}, logger)
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return nil, err
	}
	if err := manager.AddToRouter(router); err != nil {
		return nil, err
	}
	deliveries, err := pubSub.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	e := &runningEndpoint{store: store, pubSub: pubSub, router: router, manager: manager, deliveries: deliveries, routerDone: make(chan error, 1)}
	go func() { e.routerDone <- router.Run(ctx) }()
	<-router.Running()
	return e, nil
}

// receive prints n deliveries with their lateness, and fails on an early one.
func (e *runningEndpoint) receive(ctx context.Context, out io.Writer, n int) error {
	for range n {
		select {
		case msg := <-e.deliveries:
			msg.Ack()
			due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(dueHeader))
			if err != nil {
				return fmt.Errorf("delivered message without its due time: %w", err)
			}
			late := time.Since(due)
			if late < 0 {
				return fmt.Errorf("%q delivered %s early", msg.Payload, -late)
			}
			fmt.Fprintf(out, "delivered %q, %d ms after due\n", msg.Payload, late.Milliseconds())
		case <-ctx.Done():
			return fmt.Errorf("waiting for deliveries: %w", ctx.Err())
		}
	}
	return nil
}

func (e *runningEndpoint) stop() error {
	if err := e.router.Close(); err != nil {
		return err
	}
	if err := <-e.routerDone; err != nil {
		return err
	}
	<-e.manager.Done() // what the stop cut short is back in the store, claimable at once
	return errors.Join(e.store.Close(), e.pubSub.Close())
}
