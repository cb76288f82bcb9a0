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

// Example schedules a payment timeout for an order and receives it when due.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)

	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint:   "orders",
		Store:      memory.New(), // persistence/sqlite survives restarts
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
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	timedOut, err := pubSub.Subscribe(ctx, "payments.timed-out")
	if err != nil {
		panic(err)
	}

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":42}`))
	timeouts.DeliverAfter(msg, 200*time.Millisecond)
	timeouts.WithOwner(msg, "order-42") // manager.CancelByOwner(ctx, "order-42") would call it off
	sent := time.Now()
	if err := manager.Publisher().Publish("payments.timed-out", msg); err != nil {
		panic(err)
	}

	got := <-timedOut
	got.Ack()
	fmt.Printf("%s after at least 200 ms: %v\n", got.Payload, time.Since(sent) >= 200*time.Millisecond)
	// Output: {"order":42} after at least 200 ms: true
}
