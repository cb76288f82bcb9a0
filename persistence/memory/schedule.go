package memory

import (
	"container/heap"
	"context"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

var _ persistence.Scheduler = (*store)(nil)

// pending reports whether no poller holds e at now and it is not parked: it was never claimed,
// or its lease ran out.
func (e *entry) pending(now time.Time) bool {
	return !e.parked() && (e.availableAt.Equal(e.timeout.Due) || !e.availableAt.After(now))
}

// Schedule keeps t and resolves its key by policy against the pending timeout that holds it.
func (s *store) Schedule(ctx context.Context, t persistence.Timeout, now time.Time, policy persistence.KeyPolicy) (persistence.Scheduled, error) {
	if err := t.Validate(); err != nil {
		return persistence.Scheduled{}, err
	}
	if err := policy.Validate(); err != nil {
		return persistence.Scheduled{}, err
	}
	if err := s.lock(ctx); err != nil {
		return persistence.Scheduled{}, err
	}
	defer s.mu.Unlock()
	if _, ok := s.byID[t.ID]; ok {
		return persistence.Scheduled{ID: t.ID, Outcome: persistence.Existed}, nil
	}
	out := persistence.Scheduled{ID: t.ID, Outcome: persistence.Created}
	if t.Key != "" {
		if holder, ok := s.byKey[t.Key]; ok {
			e := s.byID[holder]
			switch {
			case !e.pending(now): // being delivered, or parked: it keeps no key
				e.timeout.Key = ""
				delete(s.byKey, t.Key)
			case policy == persistence.KeyKeep:
				return persistence.Scheduled{ID: holder, Outcome: persistence.Duplicate}, nil
			default:
				s.delete(holder)
				out = persistence.Scheduled{ID: t.ID, Outcome: persistence.Replaced, Replaced: holder}
			}
		}
	}
	s.insert(t)
	return out, nil
}

// Reschedule moves the due time of a pending timeout.
func (s *store) Reschedule(ctx context.Context, id string, due, now time.Time) (bool, error) {
	if err := persistence.ValidateDue(due); err != nil {
		return false, err
	}
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok || !e.pending(now) {
		return false, nil
	}
	e.timeout.Due = due.UTC()
	e.availableAt = e.timeout.Due
	heap.Fix(&s.queue, e.index)
	return true, nil
}
