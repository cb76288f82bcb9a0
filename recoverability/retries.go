package recoverability

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/errorqueue"
	"github.com/timeoutmill/timeoutmill/internal/exclusive"
	"github.com/timeoutmill/timeoutmill/wire"
)

// Errors of Retries; callers test them with errors.Is.
var (
	// ErrNotAddedToRouter: a message had to wait for a delayed retry, but AddToRouter was never
	// called, so nothing consumes the deferred queue.
	ErrNotAddedToRouter = errors.New("recoverability: Retries.AddToRouter was not called; nothing consumes the deferred queue")
	// ErrDeferredQueueInUse: a second processor was about to consume a deferred queue, in this
	// router or process, or — on the AMQP and SQL transports — in another process.
	ErrDeferredQueueInUse = exclusive.ErrInUse
	// ErrHandlerPanicked wraps the value a handler panicked with; the panic counts as a failure.
	ErrHandlerPanicked = errors.New("handler panicked")
)

// Retries gives one handler immediate and delayed retries and an error queue. Create it with
// New, wrap the handler with Middleware, and add the deferred queue's processor to the same
// router with AddToRouter.
type Retries struct {
	cfg      Config
	logger   watermill.LoggerAdapter
	errors   *errorqueue.Queue
	deferred *deferredQueue // nil without a deferred queue
	misuse   sync.Once
}

// New validates cfg and returns the retries of one handler.
func New(cfg Config, logger watermill.LoggerAdapter) (*Retries, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.DurationToIgnoreOnFailure = append([]time.Duration(nil), cfg.DurationToIgnoreOnFailure...)
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	r := &Retries{
		cfg:    cfg,
		logger: logger.With(watermill.LogFields{"work_queue": cfg.WorkQueue}),
		errors: errorqueue.New(cfg.Publisher, cfg.ErrorQueue),
	}
	if q := cfg.DeferredQueue; q != "" {
		r.deferred = newDeferredQueue(q, cfg.WorkQueue, cfg.Publisher, cfg.MaxDeferredHold, r.logger)
	} else {
		r.logger.Info("Warning: no deferred queue, so messages waiting for a delayed retry go round the work queue "+
			"until they are due (Shuttle's queue thrashing); set a DeferredQueue for anything but the simplest programs", nil)
	}
	return r, nil
}

// WorkQueue is the topic of the handler whose retries these are.
func (r *Retries) WorkQueue() string { return r.cfg.WorkQueue }

// DeferredQueue is this instance's deferred queue, or "" without one.
func (r *Retries) DeferredQueue() string { return r.cfg.DeferredQueue }

// AddToRouter adds the deferred queue's processor to router, as a handler named after the
// queue. Call it before the router runs. Without a deferred queue there is nothing to add.
func (r *Retries) AddToRouter(router *message.Router) error {
	q := r.deferred
	if q == nil {
		return nil
	}
	if _, exists := router.Handlers()[q.queue]; exists {
		return fmt.Errorf("%w: the router has a handler named %s already", ErrDeferredQueueInUse, q.queue)
	}
	router.AddConsumerHandler(q.queue, q.queue, deferredSubscriber{Subscriber: r.cfg.Subscriber, q: q}, q.handle)
	q.mu.Lock()
	q.added = true
	q.mu.Unlock()
	return nil
}

// Middleware gives the handler it wraps its retries. Add it to the one handler that consumes
// WorkQueue (handler.AddMiddleware(retries.Middleware)), never to the whole router: messages
// from any other topic are passed to the handler untouched, and an error is logged once.
//
// A message whose ignore-until time lies ahead is moved to the deferred queue without calling
// the handler. Otherwise the handler is called; on the message's first delivery it is called
// again at once up to ImmediateRetries times while it fails. If it still fails, the message goes
// back to the work queue for a delayed retry while its failed deliveries number fewer than
// MaximumFailureCount (by default, while the schedule lasts), and to the error queue after that.
// Either way the original is acked; it is nacked only when that move itself fails, or when the
// handler failed because the router is closing (that attempt is not counted). A panic in the
// handler counts as a failure.
func (r *Retries) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		if topic := message.SubscribeTopicFromCtx(ctx); topic != "" && topic != r.cfg.WorkQueue {
			r.misuse.Do(func() {
				r.logger.Error("Retries middleware used on a handler of another topic (added to the whole router?); passing its messages through",
					fmt.Errorf("handler topic %q is not WorkQueue %q", topic, r.cfg.WorkQueue), nil)
			})
			return h(msg)
		}
		if until, ok := ignoreUntil(msg, r.logger); ok && until.After(time.Now()) {
			return nil, r.await(msg, until)
		}

		attempts := headerCount(msg, wire.HeaderRetryAttempts)
		delayed := headerCount(msg, wire.HeaderRetryDelayedRetries)
		calls := 1
		if delayed == 0 {
			calls += r.cfg.ImmediateRetries // immediate retries come first, then the delayed ones
		}
		var err error
		for range calls {
			var produced []*message.Message
			if produced, err = r.call(h, msg); err == nil {
				return produced, nil
			}
			if ctx.Err() != nil {
				return nil, err // the router is closing: not the message's fault
			}
			attempts++
		}
		if failures := delayed + 1; failures < r.cfg.maxFailures() {
			return nil, r.retryLater(msg, err, attempts, delayed)
		}
		return nil, r.giveUp(msg, err, attempts, delayed)
	}
}

// call runs the handler, turning a panic into an error.
func (r *Retries) call(h message.HandlerFunc, msg *message.Message) (produced []*message.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanicked, p)
			r.logger.Error("Handler panicked", err, watermill.LogFields{"message_uuid": msg.UUID, "stack": string(debug.Stack())})
		}
	}()
	return h(msg)
}

// await moves a message that may not be handled yet to the deferred queue, lowering its next
// processing time, or without one back to the work queue.
func (r *Retries) await(msg *message.Message, until time.Time) error {
	out := msg.Copy()
	out.SetContext(publishContext(msg))
	delete(out.Metadata, headerDeferredPass)
	if r.deferred == nil {
		if err := r.cfg.Publisher.Publish(r.cfg.WorkQueue, out); err != nil {
			return fmt.Errorf("returning waiting message %s to %s: %w", msg.UUID, r.cfg.WorkQueue, err)
		}
		return nil
	}
	if err := r.deferred.awaitSubscription(msg.Context()); err != nil {
		return err
	}
	r.deferred.lower(until)
	if err := r.cfg.Publisher.Publish(r.deferred.queue, out); err != nil {
		return fmt.Errorf("moving waiting message %s to %s: %w", msg.UUID, r.deferred.queue, err)
	}
	return nil
}

// retryLater sends a copy back to the work queue, to be ignored until the next delayed retry.
func (r *Retries) retryLater(msg *message.Message, cause error, attempts, delayed int) error {
	wait := r.cfg.ignoreFor(delayed + 1)
	until := time.Now().Add(wait)
	out := msg.Copy()
	out.SetContext(publishContext(msg))
	out.Metadata.Set(wire.HeaderRetryIgnoreUntil, until.UTC().Format(time.RFC3339Nano))
	out.Metadata.Set(wire.HeaderRetryAttempts, strconv.Itoa(attempts))
	out.Metadata.Set(wire.HeaderRetryDelayedRetries, strconv.Itoa(delayed+1))
	delete(out.Metadata, headerDeferredPass)
	if err := r.cfg.Publisher.Publish(r.cfg.WorkQueue, out); err != nil {
		return fmt.Errorf("scheduling delayed retry of message %s after %v: %w", msg.UUID, cause, err)
	}
	r.logger.Info("Handler failed; delayed retry scheduled", watermill.LogFields{
		"message_uuid": msg.UUID, "error": cause.Error(), "attempts": attempts,
		"delayed_retry": delayed + 1, "ignore_for": wait.String(),
	})
	return nil
}

// giveUp moves the message to the error queue with the failure headers. The retry headers are
// left behind, so a message returned from the error queue to its work queue starts afresh.
func (r *Retries) giveUp(msg *message.Message, cause error, attempts, delayed int) error {
	out := msg.Copy()
	out.SetContext(publishContext(msg))
	for _, h := range []string{wire.HeaderRetryIgnoreUntil, wire.HeaderRetryAttempts, wire.HeaderRetryDelayedRetries, headerDeferredPass} {
		delete(out.Metadata, h)
	}
	out.Metadata.Set(wire.HeaderFailureDelayedRetries, strconv.Itoa(delayed))
	handler := message.HandlerNameFromCtx(msg.Context())
	if err := r.errors.Send(out, errorqueue.Failure{Reason: cause.Error(), Queue: r.cfg.WorkQueue, Handler: handler, Attempts: attempts}); err != nil {
		return err
	}
	r.logger.Error("Handler failed and is out of retries; message moved to the error queue", cause, watermill.LogFields{
		"message_uuid": msg.UUID, "attempts": attempts, "delayed_retries": delayed, "error_queue": r.errors.Topic(),
	})
	return nil
}

// publishContext is the context to publish a message's successor with: the message's, less its
// cancellation. The message's context ends when the router closes; a publish it cut short, after
// the broker took the message but before it confirmed it, would have the original nacked and
// delivered again beside its successor — a duplicate, retried or returned from the deferred
// queue before its time. A publish is short either way: transports fail it at once in an outage.
func publishContext(msg *message.Message) context.Context {
	return context.WithoutCancel(msg.Context())
}

// ignoreUntil reads a message's HeaderRetryIgnoreUntil. An unreadable one is logged and
// ignored: the message is handled rather than stuck.
func ignoreUntil(msg *message.Message, logger watermill.LoggerAdapter) (time.Time, bool) {
	v, ok := msg.Metadata[wire.HeaderRetryIgnoreUntil]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		logger.Error("Unreadable ignore-until header; handling the message now", err,
			watermill.LogFields{"message_uuid": msg.UUID, "header": wire.HeaderRetryIgnoreUntil})
		return time.Time{}, false
	}
	return t, true
}

// headerCount reads a retry counter; absent or unreadable counts as 0.
func headerCount(msg *message.Message, key string) int {
	n, err := strconv.Atoi(msg.Metadata.Get(key))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
