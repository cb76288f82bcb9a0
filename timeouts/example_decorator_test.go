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

// ExamplePublisherDecorator lets a handler delay the messages it returns: the router's
// publishers are decorated, so the payment check the "place-order" handler returns goes
// through the orders endpoint's Timeouts queue and reaches payments.check 100 ms later.
func ExamplePublisherDecorator() {
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	store := memory.New().(memStore)
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint:   "orders",
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
	router.AddPublisherDecorators(timeouts.PublisherDecorator("orders"))
	if err := manager.AddToRouter(router); err != nil {
		panic(err)
	}

	router.AddHandler("place-order", "orders.placed", pubSub, "payments.check", pubSub,
		func(msg *message.Message) ([]*message.Message, error) {
			check := message.NewMessage(watermill.NewUUID(), msg.Payload)
			timeouts.DeliverAfter(check, 100*time.Millisecond) // has the customer paid by then?
			return []*message.Message{check}, nil
		})
	checked := make(chan *message.Message, 1)
	router.AddConsumerHandler("check-payment", "payments.check", pubSub, func(msg *message.Message) error {
		select {
		case checked <- msg:
		default: // a duplicate: delivery is at least once
		}
		return nil
	})

	go func() {
		if err := router.Run(context.Background()); err != nil {
			panic(err)
		}
	}()
	<-router.Running()

	placed := time.Now()
	if err := pubSub.Publish("orders.placed", message.NewMessage(watermill.NewUUID(), []byte("order 42"))); err != nil {
		panic(err)
	}
	got := <-checked
	fmt.Printf("payment check for %s, not early: %v\n", got.Payload, time.Since(placed) >= 100*time.Millisecond)

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
	// Output: payment check for order 42, not early: true
}
