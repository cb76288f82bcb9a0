package satellites

import (
	"context"
	"errors"

	"github.com/timeoutmill/timeoutmill/satellites"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// batchCalls returns store's batch calls: its own, or the fallback persistence.BatchStore
// documents. The fallback calls Store, Peek and Remove once per timeout.
func batchCalls(store persistence.Store) persistence.BatchStore {
	if b, ok := store.(persistence.BatchStore); ok {
		return b
	}
	return oneByOne{store}
}

// oneByOne makes the batch calls of a store without them, one call per timeout.
type oneByOne struct{ store persistence.Store }

func (s oneByOne) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	var inserted []string
	for _, t := range ts {
		ok, err := s.store.Store(ctx, t)
		if err != nil {
			return nil, err
		}
		if ok {
			inserted = append(inserted, t.ID)
		}
	}
	return inserted, nil
}

func (s oneByOne) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	var found []persistence.Timeout
	for _, id := range ids {
		t, err := s.store.Peek(ctx, id)
		if errors.Is(err, persistence.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		found = append(found, t)
	}
	return found, nil
}

func (s oneByOne) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	var removed []string
	for _, id := range ids {
		ok, err := s.store.Remove(ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			removed = append(removed, id)
		}
	}
	return removed, nil
}

// forwardEach makes ForwardMany of a Forwarder that forwards one timeout at a time. On an error,
// the timeouts before it were forwarded and removed. The dispatch satellite then looks each up
// again before forwarding it alone, and finds those gone.
type forwardEach struct{ satellites.Forwarder }

func (f forwardEach) ForwardMany(ctx context.Context, fs []satellites.Forwarding) ([]string, error) {
	var removed []string
	for _, x := range fs {
		ok, err := f.Forward(ctx, x.Timeout, x.Message)
		if err != nil {
			return nil, err
		}
		if ok {
			removed = append(removed, x.Timeout.ID)
		}
	}
	return removed, nil
}
