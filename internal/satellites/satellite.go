// Package satellites holds the timeout manager's internal receivers. The store satellite on an
// endpoint's Timeouts queue persists delayed messages. The dispatch satellite on its
// TimeoutsDispatcher queue forwards due messages to their destinations. Each is a Watermill handler
// function, run by a message.Router on a queue of its own. Package timeouts wires them in.
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

// DefaultMaxBatch is the default of DispatchConfig.MaxBatch and StoreConfig.MaxBatch.
const DefaultMaxBatch = 256

// maxBatchers bounds the batches a satellite handles at once. While one waits on the store or the
// broker, the next gathers the messages that arrived meanwhile. In the store satellite a second
// batch starts only for minParallelBatch waiting messages. Fewer wait for the running batch, which
// takes no longer than a small batch would. So small batches do not multiply commits. The dispatch
// satellite starts a batch for any waiting id (dispatchParallelBatch). A due message held behind a
// running batch's confirms and removal is late by their length. The precision rows of make bench
// measured it; a backlog's many-id messages form full batches either way. On a broker the dispatch
// batches spend most of their time waiting for confirms. So several wait side by side; make bench's
// backlog on RabbitMQ + PostgreSQL measures the choice.
const (
	maxBatchers           = 8
	minParallelBatch      = 16
	dispatchParallelBatch = 1
)

// MaxUnremoved is the most due ids a dispatch satellite can have forwarded and not yet removed.
// maxBatch is its DispatchConfig.MaxBatch (0: DefaultMaxBatch). That many batches run side by side;
// each is forwarded whole before its ids are removed together. A process killed at the worst moment
// forwards these again after its restart (at least once). This is their bound.
func MaxUnremoved(maxBatch int) int {
	if maxBatch == 0 {
		maxBatch = DefaultMaxBatch
	}
	return maxBatchers * maxBatch
}

func messageContext(msg *message.Message) context.Context {
	if ctx := msg.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// detached is msg's context without its cancellation, bounded by afterForwardTimeout. It is for
// store calls that must finish once started, even while the router shuts down.
func detached(msg *message.Message) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(messageContext(msg)), afterForwardTimeout)
}

func loggerOrNop(l watermill.LoggerAdapter) watermill.LoggerAdapter {
	if l == nil {
		return watermill.NopLogger{}
	}
	return l
}

// withoutRoutingHeaders copies md without the headers that route a message through the manager.
func withoutRoutingHeaders(md map[string]string, isRouting func(string) bool) map[string]string {
	out := make(map[string]string, len(md))
	for k, v := range md {
		if !isRouting(k) {
			out[k] = v
		}
	}
	return out
}
