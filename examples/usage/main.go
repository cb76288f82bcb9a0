// Command usage is the README's usage example: it schedules a message one second ahead on
// Watermill's GoChannel with the embedded SQLite store, receives it, and stops in the order the
// library requires.
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

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	logger := watermill.NopLogger{}
	dir, err := os.MkdirTemp("", "timeoutmill-usage")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	store, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "timeouts.db"), Endpoint: "orders"})
	if err != nil {
		return err
	}
	defer store.Close() // on the early returns; closing twice is harmless
	// Publish returns once a subscriber acked: a message GoChannel drops while closing is not
	// taken for delivered.
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint:   "orders", // queues orders.Timeouts and orders.TimeoutsDispatcher
		Store:      store,    // or persistence/memory, postgres, mysql, sqlserver
		Publisher:  pubSub,   // any Watermill publisher...
		Subscriber: pubSub,   // ...and subscriber with queue semantics
	}, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	if err := manager.AddToRouter(router); err != nil { // the satellites and the poller
		return err
	}
	received := make(chan *message.Message, 1)
	router.AddConsumerHandler("reminders", "reminders", pubSub, func(msg *message.Message) error {
		select {
		case received <- msg:
		default: // a duplicate: delivery is at least once
		}
		return nil
	})
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	select {
	case <-router.Running(): // GoChannel drops what is published before anyone subscribes
	case err := <-runErr:
		return err
	}

	msg := message.NewMessage(watermill.NewUUID(), []byte("order 42 not paid yet?"))
	timeouts.DeliverAfter(msg, time.Second) // or DeliverAt(msg, t)
	sent := time.Now()
	// Schedule returns once the timeout is stored: Cancel, Reschedule and Get see it at once.
	scheduled, err := manager.Schedule(ctx, "reminders", msg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "scheduled %s\n", scheduled.Outcome)
	select {
	case got := <-received:
		fmt.Fprintf(out, "received %q after %.1f s\n", got.Payload, time.Since(sent).Seconds())
	case <-ctx.Done():
		err = ctx.Err()
	}

	// Stop in this order: the router, then the manager's work in flight, then the store.
	if err := router.Close(); err != nil {
		return err
	}
	<-manager.Done()
	return errors.Join(err, store.Close())
}
