// Package memory is an in-memory persistence.Store: fast, for tests and for processes whose
// timeouts need not survive a restart. Everything it holds is lost when the process ends; use
// persistence/sqlite for the durable embedded default.
//
// It has no clock of its own (it does not implement persistence.Clocked): every manager on it runs
// in its process and reads that process's clock, which therefore decides when a timeout is due.
//
// # Stability
//
// The store's API is stable. While timeoutmill is at v0, an incompatible change to it is made only
// with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in a new
// major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md).
package memory

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/storeopen"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// store keeps timeouts in a map, ordered for claiming by a min-heap on the time each becomes
// claimable (its due time, or the end of its claim's lease). It is safe for concurrent use.
type store struct {
	openMark // set by New; NewManager reads it, never the fields below
	mu       sync.Mutex
	byID     map[string]*entry
	byOwner  map[string]map[string]struct{}
	byKey    map[string]string // key -> id of the timeout that holds it
	queue    claimQueue        // every timeout that is not parked
	held     map[string]bool   // instance names taken by HoldInstance
	closed   bool
}

type openMark = storeopen.Mark // embedded by this name: no exported field

type entry struct {
	timeout     persistence.Timeout
	availableAt time.Time
	index       int    // position in the heap; -1 while parked
	claimedBy   string // the instance of ClaimDueAs that claimed it last, "" for none
}

var (
	_ persistence.Store      = (*store)(nil)
	_ persistence.Inspector  = (*store)(nil)
	_ persistence.BatchStore = (*store)(nil)
	_ persistence.Releaser   = (*store)(nil)
)

// New returns an empty store. Besides persistence.Store it implements every optional interface
// of package persistence (BatchStore, Scheduler, Inspector, Releaser, Handover, Claimer, Parker),
// which the timeout manager finds by type assertion; a user reaches them through the Manager
// (Manager.Stats, Manager.List, Manager.Schedule, ...).
func New() persistence.Store {
	return &store{
		openMark: storeopen.Opened(),
		byID:     make(map[string]*entry),
		byOwner:  make(map[string]map[string]struct{}),
		byKey:    make(map[string]string),
		held:     make(map[string]bool),
	}
}

func (s *store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	return nil
}

// Store keeps a copy of t; storing an id already kept changes nothing.
func (s *store) Store(ctx context.Context, t persistence.Timeout) (bool, error) {
	if err := t.ValidateUnkeyed(); err != nil {
		return false, err
	}
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	return s.insert(t), nil
}

// insert keeps a copy of t unless its id is stored already; the caller holds s.mu.
func (s *store) insert(t persistence.Timeout) bool {
	if _, ok := s.byID[t.ID]; ok {
		return false
	}
	t = clone(t)
	t.Due = t.Due.UTC()
	e := &entry{timeout: t, availableAt: t.Due}
	s.byID[t.ID] = e
	heap.Push(&s.queue, e)
	if t.Owner != "" {
		if s.byOwner[t.Owner] == nil {
			s.byOwner[t.Owner] = make(map[string]struct{})
		}
		s.byOwner[t.Owner][t.ID] = struct{}{}
	}
	if t.Key != "" {
		s.byKey[t.Key] = t.ID
	}
	return true
}

// Next returns when the earliest timeout becomes claimable.
func (s *store) Next(ctx context.Context) (time.Time, bool, error) {
	if err := s.lock(ctx); err != nil {
		return time.Time{}, false, err
	}
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return time.Time{}, false, nil
	}
	return s.queue[0].availableAt, true, nil
}

// ClaimDue claims up to limit timeouts claimable at now, earliest first.
func (s *store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	return s.claim(ctx, "", now, limit, lease)
}

// claim claims up to limit timeouts claimable at now for by ("" for no instance).
func (s *store) claim(ctx context.Context, by string, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var claimed []*entry
	for len(s.queue) > 0 && len(claimed) < limit && !s.queue[0].availableAt.After(now) {
		claimed = append(claimed, heap.Pop(&s.queue).(*entry))
	}
	ids := make([]string, len(claimed))
	until := now.Add(lease).UTC()
	for i, e := range claimed {
		ids[i] = e.timeout.ID
		e.availableAt = until
		e.claimedBy = by
		heap.Push(&s.queue, e)
	}
	return ids, nil
}

// Peek returns a copy of the timeout with that id.
func (s *store) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	if err := s.lock(ctx); err != nil {
		return persistence.Timeout{}, err
	}
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok {
		return persistence.Timeout{}, persistence.ErrNotFound
	}
	return clone(e.timeout), nil
}

// Remove deletes the timeout with that id.
func (s *store) Remove(ctx context.Context, id string) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	return s.delete(id), nil
}

// Cancel deletes the pending timeout with that id.
func (s *store) Cancel(ctx context.Context, id string) (bool, error) {
	return s.Remove(ctx, id)
}

// CancelByOwner deletes every timeout of owner.
func (s *store) CancelByOwner(ctx context.Context, owner string) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for id := range s.byOwner[owner] {
		if s.delete(id) {
			n++
		}
	}
	return n, nil
}

// IncrementFailureCount records a failed forwarding attempt.
func (s *store) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if ok {
		e.timeout.FailureCount++
	}
	return ok, nil
}

// Stats describes what the store holds at now.
func (s *store) Stats(ctx context.Context, now time.Time) (persistence.Stats, error) {
	if err := s.lock(ctx); err != nil {
		return persistence.Stats{}, err
	}
	defer s.mu.Unlock()
	st := persistence.Stats{Pending: len(s.byID), ByDestination: map[string]int{}}
	for _, e := range s.byID {
		due := e.timeout.Due
		if st.Earliest.IsZero() || due.Before(st.Earliest) {
			st.Earliest = due
		}
		if due.After(st.Latest) {
			st.Latest = due
		}
		switch {
		case e.parked():
			st.Parked++
		case !e.pending(now):
			st.Claimed++
			fallthrough
		default:
			if !due.After(now) {
				st.DueNow++
			}
		}
		st.ByDestination[e.timeout.Destination]++
	}
	return st, nil
}

// List returns a page of timeouts in due time order, then id, without payloads.
func (s *store) List(ctx context.Context, opts persistence.ListOptions) ([]persistence.Timeout, error) {
	if opts.Limit <= 0 {
		opts.Limit = 100
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []persistence.Timeout
	for _, e := range s.byID {
		t := e.timeout
		if !matches(t, opts) {
			continue
		}
		t = clone(t)
		t.Payload = nil
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b persistence.Timeout) int {
		if c := a.Due.Compare(b.Due); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if len(out) > opts.Limit {
		out = out[:opts.Limit]
	}
	return out, nil
}

// matches reports whether t passes the filters of opts.
func matches(t persistence.Timeout, o persistence.ListOptions) bool {
	switch {
	case o.Owner != "" && t.Owner != o.Owner,
		o.Destination != "" && t.Destination != o.Destination,
		o.Key != "" && t.Key != o.Key,
		o.Parked && t.Parked == "",
		!o.DueFrom.IsZero() && t.Due.Before(o.DueFrom),
		!o.DueBefore.IsZero() && !t.Due.Before(o.DueBefore):
		return false
	case o.After.ID != "":
		c := t.Due.Compare(o.After.Due)
		return c > 0 || c == 0 && t.ID > o.After.ID
	}
	return true
}

// Close makes every later call fail. It holds nothing that needs releasing.
func (s *store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// delete removes id from every index; the caller holds s.mu.
func (s *store) delete(id string) bool {
	e, ok := s.byID[id]
	if !ok {
		return false
	}
	delete(s.byID, id)
	if !e.parked() {
		heap.Remove(&s.queue, e.index)
	}
	if owner := e.timeout.Owner; owner != "" {
		delete(s.byOwner[owner], id)
		if len(s.byOwner[owner]) == 0 {
			delete(s.byOwner, owner)
		}
	}
	if key := e.timeout.Key; key != "" && s.byKey[key] == id {
		delete(s.byKey, key)
	}
	return true
}

func clone(t persistence.Timeout) persistence.Timeout {
	t.Payload = slices.Clone(t.Payload)
	if t.Metadata != nil {
		md := make(map[string]string, len(t.Metadata))
		for k, v := range t.Metadata {
			md[k] = v
		}
		t.Metadata = md
	}
	return t
}
