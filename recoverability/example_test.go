package recoverability_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The middleware on one handler of a router: one immediate retry, then one delayed retry
// through this instance's deferred queue.
func Example() {
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	retries, err := recoverability.New(recoverability.Config{
		WorkQueue:                 "payments",
		DeferredQueue:             wire.DeferredQueue("billing", "example-1"), // billing.Deferred.example-1: this instance's
		ImmediateRetries:          1,
		DurationToIgnoreOnFailure: []time.Duration{200 * time.Millisecond},
		Publisher:                 pubSub,
		Subscriber:                pubSub,
	}, nil)
	if err != nil {
		panic(err)
	}

	var attempts atomic.Int32
	charged := make(chan struct{})
	handler := router.AddConsumerHandler("charge", "payments", pubSub, func(msg *message.Message) error {
		n := attempts.Add(1)
		if n < 3 {
			fmt.Printf("attempt %d: provider unavailable\n", n)
			return errors.New("provider unavailable")
		}
		fmt.Printf("attempt %d: charged %s (delayed retry %s)\n", n, msg.Payload, msg.Metadata.Get(wire.HeaderRetryDelayedRetries))
		close(charged)
		return nil
	})
	handler.AddMiddleware(retries.Middleware) // this handler only
	if err := retries.AddToRouter(router); err != nil {
		panic(err)
	}

	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()
	if err := pubSub.Publish("payments", message.NewMessage(watermill.NewUUID(), []byte("order 42"))); err != nil {
		panic(err)
	}
	<-charged
	_ = router.Close()

	// Output:
	// attempt 1: provider unavailable
	// attempt 2: provider unavailable
	// attempt 3: charged order 42 (delayed retry 1)
}
