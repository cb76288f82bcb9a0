// Package exclusive lets recoverability ask a transport for a subscription that no other
// consumer may share: a deferred queue belongs to one running instance, and how it is processed
// relies on that. The request travels in the context of Subscribe, so that the transports need no
// public method for it; a transport that knows no way to refuse a second consumer ignores it.
// amqptransport answers it with an exclusive AMQP consumer, sqltransport with a lock held in the
// database for as long as the subscription lasts.
package exclusive

import (
	"context"
	"errors"
)

// ErrInUse is returned by Subscribe when another consumer holds the queue; its text names the
// queue. It is recoverability.ErrDeferredQueueInUse.
var ErrInUse = errors.New("recoverability: deferred queue already in use")

type key struct{}

// With marks ctx as the context of a subscription that must be the queue's only consumer.
func With(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// Requested reports whether ctx asks for an exclusive subscription.
func Requested(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}
