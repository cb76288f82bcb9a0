// Command rabbitmq-postgres is a saga-like flow over RabbitMQ with timeouts kept in PostgreSQL:
// placing an order schedules a payment timeout for it; a payment that arrives in time cancels
// the timeout (by owner, the order id); an order left unpaid times out.
//
// Against the servers `make test` starts:
//
//	make up && source <(scripts/services.sh env)
//	go run ./examples/rabbitmq-postgres -amqp "$TIMEOUTMILL_TEST_AMQP_URL" -postgres "$TIMEOUTMILL_TEST_POSTGRES_DSN"
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// paymentWindow is how long an order may wait for its payment.
const paymentWindow = 2 * time.Second

func main() {
	amqpURL := flag.String("amqp", os.Getenv("TIMEOUTMILL_TEST_AMQP_URL"), "RabbitMQ URL")
	pgDSN := flag.String("postgres", os.Getenv("TIMEOUTMILL_TEST_POSTGRES_DSN"), "PostgreSQL DSN for the timeouts")
	schema := flag.String("schema", "public", "PostgreSQL schema for the timeouts table")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, *amqpURL, *pgDSN, *schema); err != nil {
		log.Fatal(err)
	}
}

// topics of one run; a random suffix keeps runs apart on a shared broker.
type topics struct{ endpoint, placed, paid, timedOut string }

func newTopics() topics {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := "shop-" + hex.EncodeToString(b)
	return topics{endpoint: e, placed: e + ".orders.placed", paid: e + ".payments.received", timedOut: e + ".payments.timed-out"}
}

func run(ctx context.Context, out io.Writer, amqpURL, pgDSN, schema string) error {
	logger := watermill.NopLogger{}
	t := newTopics()
	pub, sub, err := amqptransport.New(amqptransport.Config{URL: amqpURL}, logger)
	if err != nil {
		return err
	}
	defer pub.Close()
	defer sub.Close()
	store, err := postgres.Open(ctx, postgres.Config{DSN: pgDSN, Schema: schema, Endpoint: t.endpoint})
	if err != nil {
		return err
	}
	defer store.Close()
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint: t.endpoint, Store: store, Publisher: pub, Subscriber: sub,
	}, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	if err := manager.AddToRouter(router); err != nil {
		return err
	}

	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	outcomes := make(chan string, 2)

	// An order was placed: give it paymentWindow to be paid.
	router.AddConsumerHandler("order-placed", t.placed, sub, func(msg *message.Message) error {
		order := string(msg.Payload)
		timeout := message.NewMessage(watermill.NewUUID(), []byte(order))
		timeouts.DeliverAfter(timeout, paymentWindow)
		timeouts.WithOwner(timeout, order)
		say("order %s placed: payment due within %s", order, paymentWindow)
		return manager.Publisher().Publish(t.timedOut, timeout)
	})
	// A payment arrived: call off the order's timeout.
	router.AddConsumerHandler("payment-received", t.paid, sub, func(msg *message.Message) error {
		order := string(msg.Payload)
		n, err := manager.CancelByOwner(msg.Context(), order)
		if err != nil {
			return err
		}
		say("order %s paid: %d payment timeout cancelled", order, n)
		outcomes <- order + " paid"
		return nil
	})
	// The timeout fired: the order was not paid in time.
	router.AddConsumerHandler("payment-timed-out", t.timedOut, sub, func(msg *message.Message) error {
		say("order %s not paid in time: cancelling the order", msg.Payload)
		outcomes <- string(msg.Payload) + " timed out"
		return nil
	})

	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	<-router.Running()
	defer func() { _ = router.Close(); <-routerDone; <-manager.Done() }() // then the deferred Closes
	// The manager creates the store's tables as the router starts it; this example reads the
	// store's Stats right away, so it waits for them.
	select {
	case <-manager.Ready():
	case <-ctx.Done():
		return fmt.Errorf("waiting for the store to be set up: %w", ctx.Err())
	}

	for _, order := range []string{"A-1", "B-2"} {
		if err := pub.Publish(t.placed, message.NewMessage(watermill.NewUUID(), []byte(order))); err != nil {
			return err
		}
	}
	// A-1 pays once both timeouts are scheduled (well within its window); B-2 never does.
	for {
		st, err := store.Stats(ctx, time.Now())
		if err != nil {
			return err
		}
		if st.Pending == 2 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the payment timeouts to be stored: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := pub.Publish(t.paid, message.NewMessage(watermill.NewUUID(), []byte("A-1"))); err != nil {
		return err
	}

	for range 2 {
		select {
		case o := <-outcomes:
			_ = o
		case <-ctx.Done():
			return fmt.Errorf("waiting for the orders' outcomes: %w", ctx.Err())
		}
	}
	time.Sleep(paymentWindow) // had A-1's timeout not been cancelled, it would fire now
	select {
	case o := <-outcomes:
		return fmt.Errorf("unexpected outcome %q", o)
	default:
	}
	say("done")
	return nil
}
