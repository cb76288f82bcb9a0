package satellites

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// Every call a satellite makes to the store or the broker goes through its breaker's Call. It gets
// a deadline: a call to a peer that stopped answering ends as a failure, and is retried. While it
// hangs, the breaker counts the time since the stage's last success. So the critical error comes on
// time, even if the call never returns.

// guarded runs one call of a stage through its breaker.
func guarded[T any](ctx context.Context, b *breaker.CircuitBreaker, call func(context.Context) (T, error)) (T, error) {
	ctx, end := b.Call(ctx)
	v, err := call(ctx)
	end(err)
	return v, err
}

// guardedCalls makes a store's batch calls through a breaker.
type guardedCalls struct {
	calls   persistence.BatchStore
	breaker *breaker.CircuitBreaker
}

func (g guardedCalls) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	return guarded(ctx, g.breaker, func(ctx context.Context) ([]string, error) { return g.calls.StoreMany(ctx, ts) })
}

func (g guardedCalls) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	return guarded(ctx, g.breaker, func(ctx context.Context) ([]persistence.Timeout, error) { return g.calls.PeekMany(ctx, ids) })
}

func (g guardedCalls) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	return guarded(ctx, g.breaker, func(ctx context.Context) ([]string, error) { return g.calls.RemoveMany(ctx, ids) })
}

// GuardedPublisher publishes through a breaker: each Publish is a call (breaker.CircuitBreaker's
// Call). Each message carries the call's deadline in its context for the length of the Publish.
// Transports that wait for the broker's confirmation honour it. Afterwards the messages get their
// own contexts back. So a message published again (to the error queue, say) has no deadline that
// has passed.
type GuardedPublisher struct {
	message.Publisher
	Breaker *breaker.CircuitBreaker
	// Timeout, when positive, is each Publish's deadline instead of the breaker's CallTimeout
	// (breaker.CircuitBreaker.CallWithin).
	Timeout time.Duration
}

// Publish publishes msgs to topic within the breaker's call deadline.
func (p GuardedPublisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return p.Publisher.Publish(topic, msgs...)
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = p.Breaker.CallTimeout()
	}
	callCtx, end := p.Breaker.CallWithin(msgs[0].Context(), timeout)
	deadline, _ := callCtx.Deadline()
	own := make([]context.Context, len(msgs))
	for i, m := range msgs {
		own[i] = m.Context()
		ctx, cancel := context.WithDeadline(own[i], deadline)
		defer cancel()
		m.SetContext(ctx)
	}
	defer func() {
		for i, m := range msgs {
			m.SetContext(own[i])
		}
	}()
	err := p.Publisher.Publish(topic, msgs...)
	end(err)
	return err
}
