package memory

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

var _ persistence.Handover = (*store)(nil)

// hidden reports whether e is claimed until persistence.HiddenFrom or later.
func (e *entry) hidden() bool {
	return !e.parked() && !e.availableAt.Before(persistence.HiddenFrom) && !e.availableAt.Equal(e.timeout.Due)
}

// Survey describes the timeouts due at or after from.
func (s *store) Survey(ctx context.Context, from time.Time) (persistence.Survey, error) {
	if err := s.lock(ctx); err != nil {
		return persistence.Survey{}, err
	}
	defer s.mu.Unlock()
	sv := persistence.Survey{Destinations: map[string]int{}}
	for _, e := range s.byID {
		if e.timeout.Due.Before(from) || e.parked() {
			continue
		}
		sv.Count++
		sv.Destinations[e.timeout.Destination]++
		if e.timeout.Due.After(sv.Latest) {
			sv.Latest = e.timeout.Due
		}
		if e.hidden() {
			sv.Hidden++
		}
	}
	return sv, nil
}

// Hide claims until mark up to limit timeouts due at or after from that no poller holds at now.
func (s *store) Hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]persistence.Timeout, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if limit <= 0 {
		return nil, nil
	}
	var eligible []*entry
	for _, e := range s.byID {
		if e.parked() {
			continue
		}
		free := e.availableAt.Equal(e.timeout.Due) || !e.availableAt.After(now)
		abandoned := e.hidden() && !e.availableAt.Equal(mark)
		if free && !e.timeout.Due.Before(from) || abandoned {
			eligible = append(eligible, e)
		}
	}
	slices.SortFunc(eligible, func(a, b *entry) int {
		return cmp.Or(a.availableAt.Compare(b.availableAt), strings.Compare(a.timeout.ID, b.timeout.ID))
	})
	eligible = eligible[:min(limit, len(eligible))]
	out := make([]persistence.Timeout, len(eligible))
	for i, e := range eligible {
		e.availableAt = mark.UTC()
		e.claimedBy = ""
		heap.Fix(&s.queue, e.index)
		out[i] = clone(e.timeout)
	}
	slices.SortFunc(out, func(a, b persistence.Timeout) int {
		return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Release makes the timeouts with these ids claimable again from their due time.
func (s *store) Release(ctx context.Context, ids []string) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for _, id := range ids {
		if e, ok := s.byID[id]; ok && !e.parked() {
			e.availableAt = e.timeout.Due
			e.claimedBy = ""
			heap.Fix(&s.queue, e.index)
			n++
		}
	}
	return n, nil
}
