package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// CountDue counts the timeouts that are not parked and are due before each of bounds
// (persistence.DueCounter). It reads every timeout, as Stats does.
func (s *store) CountDue(ctx context.Context, bounds []time.Time) ([]int, error) {
	for _, b := range bounds {
		if b.Before(persistence.MinDue) || b.After(persistence.MaxDue) {
			return nil, fmt.Errorf("%w: bound %s is out of range %s..%s", persistence.ErrInvalidTimeout,
				b.UTC().Format(time.RFC3339Nano), persistence.MinDue.Format(time.RFC3339), persistence.MaxDue.Format(time.RFC3339))
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	counts := make([]int, len(bounds))
	for _, e := range s.byID {
		if e.parked() {
			continue
		}
		for i, b := range bounds {
			if e.timeout.Due.Before(b) {
				counts[i]++
			}
		}
	}
	return counts, nil
}
