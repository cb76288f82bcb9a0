// Package satellites is the contract between the timeout manager's dispatch satellite and the code
// that delivers a due message for it. A satellite is an internal receiver on a queue of its own,
// run by the application's message.Router: the store satellite on an endpoint's Timeouts queue,
// which persists delayed messages, and the dispatch satellite on its TimeoutsDispatcher queue,
// which forwards due messages to their destinations (package timeouts wires both in).
//
// By default the dispatch satellite publishes a due message and then removes its timeout: at
// least once. A Forwarder, set as timeouts.Config.Forwarder, does both in one step instead;
// transport/sqltransport's ExactlyOnceForwarder is one, for a SQL transport on the store's
// database, and is also a BatchForwarder. The satellites themselves are internal.
//
// # Stability
//
// This package's API is stable, as timeouts' is: while timeoutmill is at v0, an incompatible
// change to it is made only with an entry marked Breaking in CHANGELOG.md that says how to
// migrate; from v1 on, only in a new major version (docs/releasing.md).
package satellites

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Forwarder delivers a due timeout's message and removes the timeout, in one step: a transport
// sharing the store's database does both in one transaction (exactly once). removed is false when
// the timeout was already gone, in which case nothing may have been published.
type Forwarder interface {
	Forward(ctx context.Context, t persistence.Timeout, msg *message.Message) (removed bool, err error)
}

// BatchForwarder is a Forwarder that also forwards many due timeouts in one step: a transport
// sharing the store's database inserts the messages and deletes the timeouts in one transaction,
// one commit for the batch instead of one per message, still exactly once. With one, and a
// persistence.BatchStore, the dispatch satellite dispatches the due timeouts it is handling at
// the same moment together: one PeekMany, one ForwardMany.
//
// If a Forwarder is not a BatchForwarder, the dispatch satellite calls Forward for each timeout.
type BatchForwarder interface {
	Forwarder
	// ForwardMany delivers each Forwarding's message to its timeout's destination and removes
	// the timeouts, all in one step, and returns the ids of the timeouts it removed: it
	// delivered those, and nothing for the others, which were gone already. On an error nothing
	// was delivered or removed, except when the outcome of the final commit is unknown; the
	// dispatch satellite then dispatches each alone, looking it up again first, so a timeout
	// whose commit went through is found gone and not delivered twice.
	ForwardMany(ctx context.Context, fs []Forwarding) (removed []string, err error)
}

// Forwarding is a due timeout and the message to deliver for it.
type Forwarding struct {
	Timeout persistence.Timeout
	Message *message.Message
}
