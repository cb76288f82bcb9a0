package satellites

import (
	"context"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// BatchForwarder is a Forwarder that also forwards many due timeouts in one step: a transport
// sharing the store's database inserts the messages and deletes the timeouts in one transaction,
// one commit for the batch instead of one per message, still exactly once. With one, and a
// BatchStore, the dispatch satellite dispatches the due timeouts it is handling at the same
// moment together: one PeekMany, one ForwardMany.
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

// forwardMany forwards and removes the timeouts in one ForwardMany (exactly once). If a batch of
// many fails, each is dispatched alone, looked up again first: a commit whose outcome was unknown
// may have gone through, and its timeouts are then found gone rather than forwarded twice.
func (d *Dispatch) forwardMany(ctx context.Context, found []forward) {
	fs := make([]Forwarding, len(found))
	for i, f := range found {
		fs[i] = Forwarding{Timeout: f.t, Message: f.out}
	}
	removed, err := guarded(ctx, d.cfg.Breaker, func(ctx context.Context) ([]string, error) { return d.forwarder.ForwardMany(ctx, fs) })
	if err != nil && len(found) > 1 {
		d.logger.Debug("Forwarding a batch of timeouts failed; forwarding them one by one", watermill.LogFields{"count": len(fs), "error": err.Error()})
		reqs := make([]*request[due], len(found))
		for i, f := range found {
			reqs[i] = f.req
		}
		eachAlone(reqs, d.dispatch)
		return
	}
	if err != nil {
		f := found[0]
		f.req.finish(d.forwardFailed(f.req.item.msg, f.t, f.out, err))
		return
	}
	gone := make(map[string]bool, len(removed))
	for _, id := range removed {
		gone[id] = true
	}
	for _, f := range found {
		if gone[f.t.ID] {
			d.dispatched(f.t)
		} else {
			d.logger.Debug("Timeout already dispatched or cancelled; nothing forwarded", watermill.LogFields{"timeout_id": f.t.ID})
		}
		f.req.finish(nil)
	}
}
