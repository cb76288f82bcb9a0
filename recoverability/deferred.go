package recoverability

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/exclusive"
	"github.com/timeoutmill/timeoutmill/wire"
)

// headerDeferredPass marks a message put back on a deferred queue with the pass of the queue's
// processor that put it there, so the pass knows when it has come full circle. It is removed when
// the message returns to its work queue. Only this package reads it (docs/wire.md lists it).
const headerDeferredPass = "retry.deferred_pass"

// publishRetryDelay is how long the processor holds a message it could not republish before it
// nacks it, so a failing broker is retried about once a second rather than in a tight loop.
const publishRetryDelay = time.Second

// deferredQueue processes one instance's deferred queue in passes; the package documentation
// explains how a pass works and why it cannot spin. It runs as a router handler; its state lives
// here, between the messages.
type deferredQueue struct {
	queue     string
	workQueue string
	publisher message.Publisher
	maxHold   time.Duration
	logger    watermill.LoggerAdapter

	mu sync.Mutex
	// added is set once AddToRouter added the processor to a router.
	added bool
	// subCtx is the live subscription's context, nil before the first; ready is closed while a
	// subscription is live and replaced by an open channel when it ends.
	subCtx context.Context
	ready  chan struct{}
	// pass identifies the running pass; "" between passes.
	pass string
	// earliest is the earliest ignore-until among the messages the running pass put back.
	earliest time.Time
	// next is when the next pass is due; zero when no waiting message is known.
	next time.Time
	// changed is closed and replaced whenever next is lowered or a pass starts, to wake the
	// messages held between passes.
	changed chan struct{}
}

func newDeferredQueue(queue, workQueue string, publisher message.Publisher, maxHold time.Duration, logger watermill.LoggerAdapter) *deferredQueue {
	return &deferredQueue{
		queue: queue, workQueue: workQueue, publisher: publisher, maxHold: maxHold,
		logger:  logger.With(watermill.LogFields{"deferred_queue": queue}),
		ready:   make(chan struct{}),
		changed: make(chan struct{}),
	}
}

// subscribed records a new subscription: the start-up pass is due at once.
func (q *deferredQueue) subscribed(ctx context.Context) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.subCtx = ctx
	q.pass, q.earliest, q.next = "", time.Time{}, time.Now()
	select {
	case <-q.ready: // the previous subscription's end has not been recorded yet
	default:
		close(q.ready)
	}
	q.broadcast()
	go func() {
		<-ctx.Done()
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.subCtx == ctx {
			q.ready = make(chan struct{})
			q.broadcast()
		}
	}()
}

// live reports whether a subscription is consuming the queue.
func (q *deferredQueue) live() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.subCtx != nil && q.subCtx.Err() == nil
}

// awaitSubscription waits until the queue is consumed, so that nothing is moved there before
// (GoChannel drops messages published to a topic nobody subscribes).
func (q *deferredQueue) awaitSubscription(ctx context.Context) error {
	q.mu.Lock()
	added, ready := q.added, q.ready
	q.mu.Unlock()
	if !added {
		return fmt.Errorf("%w: deferred queue %s", ErrNotAddedToRouter, q.queue)
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for deferred queue %s to be consumed: %w", q.queue, ctx.Err())
	}
}

// lower brings the next processing time forward to t, if t is earlier.
func (q *deferredQueue) lower(t time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lowerLocked(t)
}

func (q *deferredQueue) lowerLocked(t time.Time) {
	if q.next.IsZero() || t.Before(q.next) {
		q.next = t
		q.broadcast()
	}
}

func (q *deferredQueue) broadcast() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// handle is the router handler on the deferred queue.
func (q *deferredQueue) handle(msg *message.Message) error {
	ctx := msg.Context()
	until, ok := ignoreUntil(msg, q.logger)
	if !ok {
		until = time.Now() // nothing to wait for: it is due
	}
	arrived := time.Now()

	q.mu.Lock()
	if q.pass != "" && msg.Metadata.Get(headerDeferredPass) == q.pass {
		// The pass has come full circle: every message in the queue has been looked at once.
		q.pass = ""
		if !q.earliest.IsZero() {
			q.lowerLocked(q.earliest)
		}
	}
	for q.pass == "" {
		// Between passes: hold this message until the next processing time.
		q.lowerLocked(until)
		now := time.Now()
		wait := q.next.Sub(now)
		if held := now.Sub(arrived); wait > 0 && held >= q.maxHold {
			wait = 0 // the broker would give up on an unacked delivery: look at the queue early
		} else if wait > q.maxHold-held {
			wait = q.maxHold - held
		}
		if wait <= 0 {
			q.pass, q.earliest, q.next = watermill.NewUUID(), time.Time{}, time.Time{}
			q.broadcast()
			break
		}
		changed, sub := q.changed, q.subCtx
		q.mu.Unlock()
		if err := sleep(ctx, sub, changed, wait); err != nil {
			return err // closing: nack, the broker keeps the message
		}
		q.mu.Lock()
	}

	if !until.After(time.Now()) {
		q.mu.Unlock()
		return q.republish(msg, q.workQueue, "")
	}
	if q.earliest.IsZero() || until.Before(q.earliest) {
		q.earliest = until
	}
	pass := q.pass
	q.mu.Unlock()
	return q.republish(msg, q.queue, pass)
}

// sleep waits for d, a change of the next processing time, or the end of the subscription.
func sleep(ctx, sub context.Context, changed <-chan struct{}, d time.Duration) error {
	if sub == nil {
		sub = context.Background()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-changed:
	case <-ctx.Done():
		return ctx.Err()
	case <-sub.Done():
		return sub.Err()
	}
	return nil
}

// republish sends a copy of msg to topic: back to the deferred queue's tail stamped with pass,
// or, with pass "", to the work queue without the deferral headers.
func (q *deferredQueue) republish(msg *message.Message, topic, pass string) error {
	out := msg.Copy()
	out.SetContext(publishContext(msg))
	if pass != "" {
		out.Metadata.Set(headerDeferredPass, pass)
	} else {
		delete(out.Metadata, headerDeferredPass)
		delete(out.Metadata, wire.HeaderRetryIgnoreUntil)
	}
	if err := q.publisher.Publish(topic, out); err != nil {
		q.logger.Error("Moving a deferred message failed; it stays on the deferred queue", err,
			watermill.LogFields{"message_uuid": msg.UUID, "to": topic})
		_ = sleep(msg.Context(), nil, nil, publishRetryDelay)
		return fmt.Errorf("moving message %s from %s to %s: %w", msg.UUID, q.queue, topic, err)
	}
	if pass == "" {
		q.logger.Debug("Deferred message due; returned to the work queue", watermill.LogFields{"message_uuid": msg.UUID})
	}
	return nil
}

// deferredSubscriber tells the processor when the router subscribes the deferred queue and
// gives it the subscription's context, which ends when the router closes. It asks the transport
// for the queue's only consumer (internal/exclusive), so that where the transport can tell, a
// second instance on the same deferred queue is refused at start.
type deferredSubscriber struct {
	message.Subscriber
	q *deferredQueue
}

func (s deferredSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.q.live() {
		return nil, fmt.Errorf("%w: %s is consumed by another router already", ErrDeferredQueueInUse, s.q.queue)
	}
	ch, err := s.Subscriber.Subscribe(exclusive.With(ctx), topic)
	if err != nil {
		return nil, fmt.Errorf("consuming deferred queue %s: %w", s.q.queue, err)
	}
	s.q.subscribed(ctx)
	return ch, nil
}
