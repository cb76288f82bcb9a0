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

// ExampleManager_CancelByOwner tags timeouts with their order (WithOwner) and calls off all of
// one order's at once: two reminders for order 42 are cancelled, the one for order 7 arrives.
// Order 42's were due first, so had the cancel missed them they would have been printed first.
func ExampleManager_CancelByOwner() {
	ctx := context.Background()
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
	if err := manager.AddToRouter(router); err != nil {
		panic(err)
	}
	arrived := make(chan struct{}, 1)
	router.AddConsumerHandler("reminders", "reminders", pubSub, func(msg *message.Message) error {
		fmt.Printf("reminder: %s\n", msg.Payload)
		select {
		case arrived <- struct{}{}:
		default:
		}
		return nil
	})
	go func() {
		if err := router.Run(ctx); err != nil {
			panic(err)
		}
	}()
	<-router.Running()

	schedule := func(owner, text string, after time.Duration) {
		msg := message.NewMessage(watermill.NewUUID(), []byte(text))
		timeouts.DeliverAfter(msg, after)
		timeouts.WithOwner(msg, owner)
		// Schedule returns once the timeout is stored, so it can be cancelled at once.
		if _, err := manager.Schedule(ctx, "reminders", msg); err != nil {
			panic(err)
		}
	}
	schedule("order-42", "pay for order 42", time.Second)
	schedule("order-42", "confirm order 42", time.Second)
	schedule("order-7", "pay for order 7", 1200*time.Millisecond)

	n, err := manager.CancelByOwner(ctx, "order-42") // order 42 was paid
	if err != nil {
		panic(err)
	}
	fmt.Printf("cancelled %d timeouts of order-42\n", n)
	<-arrived

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
	// Output:
	// cancelled 2 timeouts of order-42
	// reminder: pay for order 7
}
