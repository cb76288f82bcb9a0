package timeouts

import (
	"context"
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// CountDue counts the stored timeouts that are not parked and are due before each of bounds,
// claimed or not, exactly: counts[i] is bounds[i]'s. It returns an error wrapping
// persistence.ErrUnsupported when the store cannot count so (see persistence.DueCounter); count
// a List of the earliest due timeouts instead.
func (m *Manager) CountDue(ctx context.Context, bounds []time.Time) ([]int, error) {
	ins, err := m.inspector()
	if err != nil {
		return nil, err
	}
	c, ok := ins.(persistence.DueCounter)
	if !ok {
		return nil, fmt.Errorf("%w: the store (%T) does not implement persistence.DueCounter", persistence.ErrUnsupported, m.cfg.Store)
	}
	counts, err := c.CountDue(ctx, bounds)
	if err != nil {
		return nil, fmt.Errorf("counting due timeouts: %w", err)
	}
	return counts, nil
}

// CountOwners counts exactly the pending timeouts of the limit owners with the most, and of no
// owner. It returns an error wrapping persistence.ErrUnsupported when the store cannot count so
// (see persistence.OwnerCounter); count a List of the earliest due timeouts instead.
func (m *Manager) CountOwners(ctx context.Context, limit int) (persistence.OwnerCounts, error) {
	ins, err := m.inspector()
	if err != nil {
		return persistence.OwnerCounts{}, err
	}
	c, ok := ins.(persistence.OwnerCounter)
	if !ok {
		return persistence.OwnerCounts{}, fmt.Errorf("%w: the store (%T) does not implement persistence.OwnerCounter", persistence.ErrUnsupported, m.cfg.Store)
	}
	counts, err := c.CountOwners(ctx, limit)
	if err != nil {
		return persistence.OwnerCounts{}, fmt.Errorf("counting owners: %w", err)
	}
	return counts, nil
}
