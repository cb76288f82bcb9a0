// Command retries shows timeoutmill's delayed retries on Watermill's in-process GoChannel, with
// no server at all.
//
// Two handlers run on one router, each with the retries middleware and a deferred queue of its
// own. "charge" fails twice and then succeeds: it is called again 0.5 s and then 1 s later,
// without holding up its subscriber meanwhile. "invoice" always fails: after one immediate and
// two delayed retries its message lands on the error queue with the failure headers. Every
// attempt is printed with the time since the start, then where each message ended.
//
//	go run ./examples/retries
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/wire"
)

// instance names this running process; a real one would use its host or pod name, so that each
// instance has a deferred queue of its own.
const instance = "example-1"

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// printer writes lines stamped with the time since start, from any goroutine.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%5.2fs  "+format+"\n", append([]any{time.Since(p.start).Seconds()}, args...)...)
}

func run(ctx context.Context, out io.Writer) error {
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer pubSub.Close()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	p := &printer{out: out, start: time.Now()}
	// Each message's outcome is noted once, however many deliveries reach it.
	charged, chargedOnce := make(chan struct{}), sync.Once{}
	failed := make(chan struct{})

	// charge fails on its first two attempts: a provider that comes back after a while.
	var chargeAttempts int
	err = withRetries(router, pubSub, recoverability.Config{
		WorkQueue: "payments", DeferredQueue: wire.DeferredQueue("payments", instance),
		DurationToIgnoreOnFailure: []time.Duration{500 * time.Millisecond, time.Second},
	}, "charge", func(msg *message.Message) error {
		chargeAttempts++ // one message: its attempts never run at once
		if chargeAttempts <= 2 {
			p.printf("charge  %s attempt %d%s: failed, provider unavailable", msg.Payload, chargeAttempts, retryNote(msg))
			return errors.New("payment provider unavailable")
		}
		p.printf("charge  %s attempt %d%s: charged", msg.Payload, chargeAttempts, retryNote(msg))
		chargedOnce.Do(func() { close(charged) })
		return nil
	})
	if err != nil {
		return err
	}

	// invoice always fails: a message that can never be handled.
	var invoiceAttempts int
	err = withRetries(router, pubSub, recoverability.Config{
		WorkQueue: "invoices", DeferredQueue: wire.DeferredQueue("invoices", instance),
		ImmediateRetries:          1,
		DurationToIgnoreOnFailure: []time.Duration{500 * time.Millisecond, time.Second},
	}, "invoice", func(msg *message.Message) error {
		invoiceAttempts++
		p.printf("invoice %s attempt %d%s: failed, customer has no billing address", msg.Payload, invoiceAttempts, retryNote(msg))
		return errors.New("customer has no billing address")
	})
	if err != nil {
		return err
	}

	// The error queue, where messages out of retries end.
	errorQueue, err := pubSub.Subscribe(ctx, wire.DefaultErrorQueue)
	if err != nil {
		return err
	}
	var failedOnce sync.Once
	go func() {
		for msg := range errorQueue {
			md := msg.Metadata
			p.printf("error queue: %s from %s (handler %s) after %s attempts, %s delayed retries: %s",
				msg.Payload, md.Get(wire.HeaderFailureQueue), md.Get(wire.HeaderFailureHandler),
				md.Get(wire.HeaderFailureAttempts), md.Get(wire.HeaderFailureDelayedRetries), md.Get(wire.HeaderFailureReason))
			msg.Ack()
			failedOnce.Do(func() { close(failed) })
		}
	}()

	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-runErr:
		return err
	}
	for topic, payload := range map[string]string{"payments": "order-42", "invoices": "invoice-7"} {
		if err := pubSub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(payload))); err != nil {
			return err
		}
	}

	for _, done := range []struct {
		ch   <-chan struct{}
		what string
	}{{charged, "order-42 to be charged"}, {failed, "invoice-7 to reach the error queue"}} {
		select {
		case <-done.ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", done.what, ctx.Err())
		}
	}
	p.printf("order-42 ended charged; invoice-7 ended on the error queue")
	if err := router.Close(); err != nil {
		return err
	}
	return <-runErr
}

// withRetries adds a handler on cfg.WorkQueue with the retries middleware, and the processor
// of its deferred queue.
func withRetries(router *message.Router, pubSub *gochannel.GoChannel, cfg recoverability.Config, name string, handle message.NoPublishHandlerFunc) error {
	cfg.Publisher, cfg.Subscriber = pubSub, pubSub
	retries, err := recoverability.New(cfg, nil)
	if err != nil {
		return err
	}
	handler := router.AddConsumerHandler(name, cfg.WorkQueue, pubSub, handle)
	handler.AddMiddleware(retries.Middleware) // this handler only
	return retries.AddToRouter(router)
}

// retryNote says which delayed retry a call is, if any.
func retryNote(msg *message.Message) string {
	if n := msg.Metadata.Get(wire.HeaderRetryDelayedRetries); n != "" {
		return " (delayed retry " + n + ")"
	}
	return ""
}
