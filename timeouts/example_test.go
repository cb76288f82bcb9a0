package timeouts_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// ExampleNewManager runs an endpoint's timeout manager on Watermill's in-process GoChannel with
// the in-memory store, next to a handler of the delayed message's topic on the same router,
// schedules a payment timeout 100 ms ahead, receives it, and stops in the order the manager
// requires.
func ExampleNewManager() {
	logger := watermill.NopLogger{}
	// NewManager refuses a GoChannel without BlockPublishUntilSubscriberAck: Publish must return
	// only once a subscriber took the message, or one dropped while closing would pass for stored.
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	store := memory.New().(memStore) // persistence/sqlite, postgres, mysql or sqlserver survive restarts

	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint:   "orders", // queues orders.Timeouts and orders.TimeoutsDispatcher
		Store:      store,
		Publisher:  pubSub,
		Subscriber: pubSub,
	}, logger)
	if err != nil {
		panic(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}
	if err := manager.AddToRouter(router); err != nil { // the satellites and the poller
		panic(err)
	}
	received := make(chan *message.Message, 1)
	router.AddConsumerHandler("payment-timeouts", "payments.timed-out", pubSub, func(msg *message.Message) error {
		select {
		case received <- msg:
		default: // a duplicate: delivery is at least once
		}
		return nil
	})

	go func() {
		if err := router.Run(context.Background()); err != nil {
			panic(err)
		}
	}()
	<-router.Running() // GoChannel drops what is published before anyone subscribes

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":42}`))
	sent := time.Now()
	timeouts.DeliverAfter(msg, 100*time.Millisecond)
	if err := manager.Publisher().Publish("payments.timed-out", msg); err != nil {
		panic(err)
	}
	got := <-received
	fmt.Printf("%s, not early: %v\n", got.Payload, time.Since(sent) >= 100*time.Millisecond)

	// Stop in this order: the router, then the manager's work in flight, then the store (and the
	// Pub/Sub, which the manager does not close).
	if err := router.Close(); err != nil {
		panic(err)
	}
	<-manager.Done()
	if err := store.Close(); err != nil {
		panic(err)
	}
	if err := pubSub.Close(); err != nil {
		panic(err)
	}
	// Output: {"order":42}, not early: true
}
