package timeouts_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// ExampleManager_Schedule schedules payment reminders, moves one, replaces one by its key and
// lists what is pending: each call sees what Schedule stored, at once.
func ExampleManager_Schedule() {
	ctx := context.Background()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	store := memory.New()
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint: "orders", Store: store, Publisher: pubSub, Subscriber: pubSub,
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
	arrived := make(chan string, 1)
	router.AddConsumerHandler("reminders", "reminders", pubSub, func(msg *message.Message) error {
		arrived <- string(msg.Payload)
		return nil
	})
	go func() {
		if err := router.Run(ctx); err != nil {
			panic(err)
		}
	}()
	<-router.Running()

	reminder := func(text string, after time.Duration) *message.Message {
		msg := message.NewMessage(watermill.NewUUID(), []byte(text))
		timeouts.DeliverAfter(msg, after)
		return msg
	}
	// A reminder in an hour, brought forward to 50 ms from now: same id, same message.
	first, err := manager.Schedule(ctx, "reminders", reminder("pay order 7", time.Hour))
	if err != nil {
		panic(err)
	}
	moved, err := manager.Reschedule(ctx, first.ID, time.Now().Add(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	fmt.Println("order 7:", first.Outcome, "then rescheduled:", moved)

	// Two reminders with one key: the second replaces the first.
	for _, text := range []string{"pay order 42", "pay order 42, last call"} {
		msg := reminder(text, time.Hour)
		timeouts.WithKey(msg, "order-42/payment", timeouts.Replace)
		res, err := manager.Schedule(ctx, "reminders", msg)
		if err != nil {
			panic(err)
		}
		fmt.Println("order 42:", res.Outcome)
	}
	pending, err := manager.List(ctx, persistence.ListOptions{Key: "order-42/payment"})
	if err != nil {
		panic(err)
	}
	got, err := manager.Get(ctx, pending[0].ID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending for order-42/payment: %q\n", got.Payload)
	fmt.Println("arrived:", <-arrived)

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
	// order 7: created then rescheduled: true
	// order 42: created
	// order 42: replaced
	// pending for order-42/payment: "pay order 42, last call"
	// arrived: pay order 7
}
