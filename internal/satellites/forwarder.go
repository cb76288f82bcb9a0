package satellites

import (
	"context"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
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

// forwardBatch dispatches the timeouts of batch together through a BatchForwarder: PeekMany,
// then one ForwardMany. Whatever fails falls back to handleOne, which forwards each alone with
// Forward, so that errors, retries, the error queue and breakers behave exactly as without
// batching, and every forward stays exactly once.
func (d *Dispatch) forwardBatch(store batchStore, fwd BatchForwarder, batch []*request[due]) {
	alone := d.dispatchAlone
	first, again, byID, ok := d.peekBatch(store, batch)
	if !ok {
		return
	}
	defer eachAlone(again, alone) // they find their timeout gone

	// The forward runs to its end even while the router shuts down (see handleOne); it is one
	// transaction, so cutting it short would only undo it.
	fwdCtx, cancel := detached(first[0].item.msg)
	defer cancel()
	var (
		fs   []Forwarding
		reqs = map[string]*request[due]{}
	)
	for _, r := range first {
		t, ok := byID[r.item.id]
		if !ok {
			d.logger.Debug("Timeout already dispatched or cancelled", watermill.LogFields{"timeout_id": r.item.id})
			r.done <- nil
			continue
		}
		out := message.NewMessage(t.ID, t.Payload)
		out.Metadata = withoutRoutingHeaders(t.Metadata, wireparse.IsRoutingHeader)
		out.SetContext(fwdCtx)
		fs = append(fs, Forwarding{Timeout: t, Message: out})
		reqs[t.ID] = r
	}
	if len(fs) == 0 {
		return
	}
	removed, err := fwd.ForwardMany(fwdCtx, fs)
	if err != nil {
		d.logger.Debug("Forwarding a batch of timeouts failed; forwarding them one by one", watermill.LogFields{"count": len(fs), "error": err.Error()})
		var wg sync.WaitGroup
		for _, f := range fs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := reqs[f.Timeout.ID]
				r.done <- alone(r.item)
			}()
		}
		wg.Wait()
		return
	}
	gone := make(map[string]bool, len(removed))
	for _, id := range removed {
		gone[id] = true
	}
	for _, f := range fs {
		if gone[f.Timeout.ID] {
			d.dispatched(f.Timeout)
		} else {
			d.logger.Debug("Timeout already dispatched or cancelled; nothing forwarded", watermill.LogFields{"timeout_id": f.Timeout.ID})
		}
		reqs[f.Timeout.ID].done <- nil
	}
}
