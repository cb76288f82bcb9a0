package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// CountOwners counts the pending timeouts of the limit owners with the most, and of no owner
// (persistence.OwnerCounter). It reads every timeout, as Stats does.
func (s *store) CountOwners(ctx context.Context, limit int) (persistence.OwnerCounts, error) {
	if err := s.lock(ctx); err != nil {
		return persistence.OwnerCounts{}, err
	}
	n := map[string]int{}
	for _, e := range s.byID {
		n[e.timeout.Owner]++
	}
	s.mu.Unlock()
	out := persistence.OwnerCounts{NoOwner: n[""], Top: []persistence.OwnerCount{}}
	for owner, k := range n {
		if owner != "" {
			out.Top = append(out.Top, persistence.OwnerCount{Owner: owner, Count: k})
		}
	}
	slices.SortFunc(out.Top, func(a, b persistence.OwnerCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Owner, b.Owner))
	})
	out.Top = out.Top[:min(max(limit, 0), len(out.Top))]
	return out, nil
}
