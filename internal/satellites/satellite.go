// Package satellites holds the timeout manager's internal receivers: the store satellite on an
// endpoint's Timeouts queue, which persists delayed messages, and the dispatch satellite on its
// TimeoutsDispatcher queue, which forwards due messages to their destinations. Each is a
// Watermill handler function run by a message.Router on a queue of its own; package timeouts
// wires them in.
package satellites

import (
	"context"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
)

// Satellite is an internal receiver on a dedicated queue.
type Satellite interface {
	// Name is the router handler's name.
	Name() string
	// Queue is the queue the satellite consumes.
	Queue() string
	// Handle processes one message. A nil error acks it; an error nacks it for redelivery.
	Handle(msg *message.Message) error
}

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = configerr.ErrInvalidConfig

func messageContext(msg *message.Message) context.Context {
	if ctx := msg.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// detached is msg's context without its cancellation, bounded by afterForwardTimeout: for store
// calls that must finish once started, even while the router shuts down and cancels message
// contexts.
func detached(msg *message.Message) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(messageContext(msg)), afterForwardTimeout)
}

func loggerOrNop(l watermill.LoggerAdapter) watermill.LoggerAdapter {
	if l == nil {
		return watermill.NopLogger{}
	}
	return l
}

// withoutRoutingHeaders copies md without the headers that route a message through the timeout
// manager.
func withoutRoutingHeaders(md map[string]string, isRouting func(string) bool) map[string]string {
	out := make(map[string]string, len(md))
	for k, v := range md {
		if !isRouting(k) {
			out[k] = v
		}
	}
	return out
}
