package sqltransport_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

// ExampleNewExactlyOnceForwarder runs the billing endpoint's timeout manager with the SQL
// transport and the PostgreSQL store on one database, in exactly-once mode: each due message is
// inserted into its destination's table and its timeout deleted in one transaction. The
// forwarder is refused (ErrExactlyOnceUnsupported) unless the transport and the store reach the
// same PostgreSQL database.
//
// It needs a PostgreSQL server, so it has no Output line: it is compiled by go test, not run.
// examples/sql-exactly-once is the runnable version.
func ExampleNewExactlyOnceForwarder() {
	ctx := context.Background()
	logger := watermill.NopLogger{}
	dsn := os.Getenv("DATABASE_URL") // postgres://user:password@localhost:5432/app

	store, err := postgres.Open(ctx, postgres.Config{DSN: dsn, Endpoint: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	pub, sub, err := sqltransport.New(ctx, sqltransport.Config{Dialect: sqltransport.PostgreSQL, DSN: dsn}, logger)
	if err != nil {
		log.Fatal(err)
	}
	forwarder, err := sqltransport.NewExactlyOnceForwarder(ctx, pub, store, logger)
	if err != nil {
		log.Fatal(err) // ErrExactlyOnceUnsupported: not one PostgreSQL database
	}
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint:   "billing",
		Store:      store,
		Publisher:  pub,
		Subscriber: sub,
		Forwarder:  forwarder, // instead of publish, then remove: at least once
	}, logger)
	if err != nil {
		log.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		log.Fatal(err)
	}
	if err := manager.AddToRouter(router); err != nil {
		log.Fatal(err)
	}
	reminded := make(chan struct{}, 1)
	router.AddConsumerHandler("remind", "payment-reminders", sub, func(msg *message.Message) error {
		fmt.Printf("reminder: %s\n", msg.Payload) // delivered once, even across a crash
		select {
		case reminded <- struct{}{}:
		default:
		}
		return nil
	})
	go func() {
		if err := router.Run(ctx); err != nil {
			log.Fatal(err)
		}
	}()
	<-router.Running()

	msg := message.NewMessage(watermill.NewUUID(), []byte("order 42 not paid yet?"))
	timeouts.DeliverAfter(msg, time.Second)
	if err := manager.Publisher().Publish("payment-reminders", msg); err != nil {
		log.Fatal(err)
	}
	<-reminded

	// Stop in this order: the router, then the manager's work in flight, then the store and the
	// transport. The forwarder runs on the publisher's pool: close it only after the router.
	if err := router.Close(); err != nil {
		log.Fatal(err)
	}
	<-manager.Done()
	if err := store.Close(); err != nil {
		log.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		log.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		log.Fatal(err)
	}
}
