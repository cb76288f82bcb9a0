package timeouts_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// ExampleManager_Schedule schedules payment reminders, moves one, replaces one by its key and
// lists what is pending: each call sees what Schedule stored, at once.
func ExampleManager_Schedule() {
	ctx := context.Background()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	store := memory.New().(memStore)
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
		timeouts.WithKey(msg, "order-42/payment", persistence.KeyReplace)
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

// ExampleManager_ScheduleTx inserts an order and its payment timeout in one transaction of the
// application's, on the SQLite file the store keeps its table in: the timeout of the order whose
// transaction rolled back never exists.
func ExampleManager_ScheduleTx() {
	ctx := context.Background()
	logger := watermill.NopLogger{}
	dir, err := os.MkdirTemp("", "timeoutmill-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// The application's database, opened as persistence/sqlite documents for ScheduleTx: the
	// write lock taken at BEGIN, and a busy timeout.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		panic(err)
	}
	store, err := sqlite.New(ctx, db, sqlite.Config{Endpoint: "orders"})
	if err != nil {
		panic(err)
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
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
	arrived := make(chan string, 2)
	router.AddConsumerHandler("payment-timeouts", "payment-timeouts", pubSub, func(msg *message.Message) error {
		arrived <- string(msg.Payload)
		return nil
	})
	go func() {
		if err := router.Run(ctx); err != nil {
			panic(err)
		}
	}()
	<-manager.Ready() // the store's table exists: ScheduleTx may be called

	placeOrder := func(id string, commit bool) (timeoutID string) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
			panic(err)
		}
		msg := message.NewMessage(watermill.NewUUID(), []byte(id+" not paid in time"))
		timeouts.DeliverAfter(msg, 50*time.Millisecond)
		if _, err := manager.ScheduleTx(ctx, tx, "payment-timeouts", msg); err != nil {
			panic(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			panic(err)
		}
		return msg.UUID
	}
	rolledBack := placeOrder("order 1", false) // neither the order nor its timeout exists
	placeOrder("order 2", true)
	_, err = manager.Get(ctx, rolledBack)
	fmt.Println("order 1's timeout found:", !errors.Is(err, persistence.ErrNotFound))
	fmt.Println(<-arrived)

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
	// order 1's timeout found: false
	// order 2 not paid in time
}
