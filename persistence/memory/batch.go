package memory

import (
	"context"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// StoreMany keeps copies of the timeouts whose ids are not stored yet and returns those ids. It
// stores none when any of them is invalid.
func (s *store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	for _, t := range ts {
		if err := t.ValidateUnkeyed(); err != nil {
			return nil, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	inserted := make([]string, 0, len(ts))
	for _, t := range ts {
		if s.insert(t) {
			inserted = append(inserted, t.ID)
		}
	}
	return inserted, nil
}

// PeekMany returns copies of the stored timeouts among ids; ids not stored are left out.
func (s *store) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]persistence.Timeout, 0, len(ids))
	for _, id := range ids {
		if e, ok := s.byID[id]; ok {
			out = append(out, clone(e.timeout))
		}
	}
	return out, nil
}

// RemoveMany deletes the timeouts with those ids and returns the ids it deleted.
func (s *store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	removed := make([]string, 0, len(ids))
	for _, id := range ids {
		if s.delete(id) {
			removed = append(removed, id)
		}
	}
	return removed, nil
}
