package satellites

import (
	"context"

	"github.com/timeoutmill/timeoutmill/internal/batcher"
	"github.com/timeoutmill/timeoutmill/satellites"

	"github.com/ThreeDotsLabs/watermill"
)

// forwardMany forwards and removes the timeouts in one ForwardMany (exactly once). If a batch of
// many fails, each is dispatched alone, and looked up again first. A commit whose outcome was
// unknown may have gone through. Its timeouts are then found gone, rather than forwarded twice.
func (d *Dispatch) forwardMany(ctx context.Context, found []forward) {
	fs := make([]satellites.Forwarding, len(found))
	for i, f := range found {
		fs[i] = satellites.Forwarding{Timeout: f.t, Message: f.out}
	}
	removed, err := guarded(ctx, d.cfg.Breaker, func(ctx context.Context) ([]string, error) { return d.forwarder.ForwardMany(ctx, fs) })
	if err != nil && len(found) > 1 {
		d.logger.Debug("Forwarding a batch of timeouts failed; forwarding them one by one", watermill.LogFields{"count": len(fs), "error": err.Error()})
		if d.cfg.OnRepublishedAlone != nil {
			d.cfg.OnRepublishedAlone(len(found))
		}
		reqs := make([]*batcher.Request[due], len(found))
		for i, f := range found {
			reqs[i] = f.req
		}
		d.eachAlone(reqs)
		return
	}
	if err != nil {
		f := found[0]
		f.req.Finish(d.forwardFailed(f.req.Item.msg, f.t, f.out, err))
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
		f.req.Finish(nil)
	}
}
