package timeouts

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Unpark replays parked timeouts. Those among ids that are parked (see persistence.Parker)
// become pending again, with no failed attempt counted. They are due at their due time (at
// once, when it is past). It returns how many it unparked. Ids not stored, or not parked, are
// ignored. A timeout parked because its message is larger than the broker takes parks again at
// its next attempt. Fix the cause first, or delete it (DeleteParked). List with
// persistence.ListOptions{Parked: true} finds the parked ones, with their reason in
// Timeout.Parked.
//
// It returns an error wrapping persistence.ErrUnsupported when the store does not implement
// persistence.Parker.
func (m *Manager) Unpark(ctx context.Context, ids ...string) (int, error) {
	n, err := m.onParkedIDs(ctx, ids, "unparking", func(ctx context.Context, p persistence.Parker) (int, error) { return p.Unpark(ctx, ids) })
	if n > 0 {
		m.logger.Info("Parked timeouts replayed", watermill.LogFields{"count": n})
		m.poller.wake(m.clock.Now())
	}
	return n, err
}

// DeleteParked deletes parked timeouts: those among ids that are parked. It returns how many it
// deleted. Ids not stored, or not parked, are ignored. A timeout replayed (Unpark) at the same
// moment is either deleted while still parked or kept and delivered. It is never deleted once
// pending.
//
// It returns an error wrapping persistence.ErrUnsupported when the store does not implement
// persistence.Parker.
func (m *Manager) DeleteParked(ctx context.Context, ids ...string) (int, error) {
	n, err := m.onParkedIDs(ctx, ids, "deleting parked", func(ctx context.Context, p persistence.Parker) (int, error) { return p.DeleteParked(ctx, ids) })
	if n > 0 {
		m.logger.Info("Parked timeouts deleted", watermill.LogFields{"count": n})
	}
	return n, err
}

// onParkedIDs checks ids and runs call, one of the store's persistence.Parker calls, on them.
// doing says what call does, for its error.
func (m *Manager) onParkedIDs(ctx context.Context, ids []string, doing string, call func(context.Context, persistence.Parker) (int, error)) (int, error) {
	parker, ok := m.cfg.Store.(persistence.Parker)
	if !ok {
		return 0, fmt.Errorf("%w: the store (%T) does not implement persistence.Parker", persistence.ErrUnsupported, m.cfg.Store)
	}
	for _, id := range ids {
		if err := checkID(id); err != nil {
			return 0, err
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	ctx, cancel := m.bounded(ctx)
	defer cancel()
	n, err := call(ctx, parker)
	if err != nil {
		return 0, fmt.Errorf("%s %d timeout(s): %w", doing, len(ids), err)
	}
	return n, nil
}

// onParked is told of each timeout the dispatch satellite parked.
func (m *Manager) onParked(persistence.Timeout) {
	m.metrics.onParked()
}
