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
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence"
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
	if err := run(ctx, os.Stdout, *amqpURL, *pgDSN, *schema, 1); err != nil {
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

// run places two orders and pays one. sends is how many times each message is published: 2
// stands for a broker that delivers a message twice, as at-least-once delivery may.
func run(ctx context.Context, out io.Writer, amqpURL, pgDSN, schema string, sends int) error {
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
	// Delivery is at least once: any of these messages may come twice. The outcomes are counted
	// by order, not by delivery, and a second delivery is said to be one.
	outcomes := newOutcomes()

	// An order was placed: give it paymentWindow to be paid. The key keeps one payment timeout per
	// order however often the order's message comes: a second one is dropped.
	router.AddConsumerHandler("order-placed", t.placed, sub, func(msg *message.Message) error {
		order := string(msg.Payload)
		timeout := message.NewMessage(watermill.NewUUID(), []byte(order))
		timeouts.DeliverAfter(timeout, paymentWindow)
		timeouts.WithOwner(timeout, order)
		timeouts.WithKey(timeout, order+"/payment", persistence.KeyKeep)
		scheduled, err := manager.Schedule(msg.Context(), t.timedOut, timeout)
		if err != nil {
			return err
		}
		if scheduled.Outcome == persistence.Duplicate {
			say("order %s placed again (at least once): its payment timeout stands", order)
			return nil
		}
		say("order %s placed: payment due within %s", order, paymentWindow)
		return nil
	})
	// A payment arrived: call off the order's timeout.
	router.AddConsumerHandler("payment-received", t.paid, sub, func(msg *message.Message) error {
		order := string(msg.Payload)
		n, err := manager.CancelByOwner(msg.Context(), order)
		if err != nil {
			return err
		}
		if !outcomes.record(order, "paid") {
			say("order %s paid again (at least once): %d payment timeout cancelled", order, n)
			return nil
		}
		say("order %s paid: %d payment timeout cancelled", order, n)
		return nil
	})
	// The timeout fired: the order was not paid in time.
	router.AddConsumerHandler("payment-timed-out", t.timedOut, sub, func(msg *message.Message) error {
		order := string(msg.Payload)
		if !outcomes.record(order, "timed out") {
			say("order %s not paid in time, again (at least once)", order)
			return nil
		}
		say("order %s not paid in time: cancelling the order", order)
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
		if err := publish(pub, t.placed, message.NewMessage(watermill.NewUUID(), []byte(order)), sends); err != nil {
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
	if err := publish(pub, t.paid, message.NewMessage(watermill.NewUUID(), []byte("A-1")), sends); err != nil {
		return err
	}

	if err := outcomes.await(ctx, "A-1", "B-2"); err != nil {
		return err
	}
	time.Sleep(paymentWindow) // had A-1's timeout not been cancelled, it would fire now
	if err := outcomes.check(map[string]string{"A-1": "paid", "B-2": "timed out"}); err != nil {
		return err
	}
	say("done")
	return nil
}

// publish publishes msg sends times, the same message each time.
func publish(pub message.Publisher, topic string, msg *message.Message, sends int) error {
	for range sends {
		if err := pub.Publish(topic, msg.Copy()); err != nil {
			return err
		}
	}
	return nil
}

// outcomes records what became of each order: one outcome per order, however many deliveries.
type outcomes struct {
	mu      sync.Mutex
	byOrder map[string]string
	others  []string      // a second, different outcome of an order: never expected
	changed chan struct{} // an order's first outcome
}

func newOutcomes() *outcomes {
	return &outcomes{byOrder: map[string]string{}, changed: make(chan struct{}, 1)}
}

// record notes an order's outcome and reports whether it is the order's first.
func (o *outcomes) record(order, outcome string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if first, ok := o.byOrder[order]; ok {
		if first != outcome {
			o.others = append(o.others, order+" "+outcome+" after "+first)
		}
		return false
	}
	o.byOrder[order] = outcome
	select {
	case o.changed <- struct{}{}:
	default:
	}
	return true
}

// await returns once every order has an outcome.
func (o *outcomes) await(ctx context.Context, orders ...string) error {
	for {
		o.mu.Lock()
		missing := slices.DeleteFunc(slices.Clone(orders), func(order string) bool { _, ok := o.byOrder[order]; return ok })
		o.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-o.changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the outcome of orders %v: %w", missing, ctx.Err())
		}
	}
}

// check returns an error unless every order ended as want says, and only so.
func (o *outcomes) check(want map[string]string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.others) > 0 {
		return fmt.Errorf("unexpected outcomes: %v", o.others)
	}
	for order, outcome := range want {
		if o.byOrder[order] != outcome {
			return fmt.Errorf("order %s: %q, want %q", order, o.byOrder[order], outcome)
		}
	}
	return nil
}
