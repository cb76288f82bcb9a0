package memory

import (
	"container/heap"
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/persistence"
)

var (
	_ persistence.Parker  = (*store)(nil)
	_ persistence.Claimer = (*store)(nil)
)

// parked reports whether e was set aside by Park.
func (e *entry) parked() bool { return e.timeout.Parked != "" }

// Park sets the timeout with that id aside with reason: it leaves the claim queue.
func (s *store) Park(ctx context.Context, id, reason string) (bool, error) {
	if reason == "" {
		return false, fmt.Errorf("%w: a parking reason is required", persistence.ErrInvalidTimeout)
	}
	if len(reason) > persistence.MaxParkReasonLength {
		cut := persistence.MaxParkReasonLength
		for cut > 0 && !utf8.RuneStart(reason[cut]) { // cut on a character boundary
			cut--
		}
		reason = reason[:cut]
	}
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok {
		return false, nil
	}
	if !e.parked() {
		heap.Remove(&s.queue, e.index)
		e.index = -1
	}
	e.timeout.Parked = reason
	e.claimedBy = ""
	if key := e.timeout.Key; key != "" && s.byKey[key] == id {
		// A parked timeout holds no key, as one being delivered holds none.
		delete(s.byKey, key)
		e.timeout.Key = ""
	}
	return true, nil
}

// Unpark makes the parked timeouts among ids claimable again from their due time.
func (s *store) Unpark(ctx context.Context, ids []string) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for _, id := range ids {
		e, ok := s.byID[id]
		if !ok || !e.parked() {
			continue
		}
		e.timeout.Parked = ""
		e.timeout.FailureCount = 0
		e.availableAt = e.timeout.Due
		heap.Push(&s.queue, e)
		n++
	}
	return n, nil
}

// DeleteParked deletes the parked timeouts among ids.
func (s *store) DeleteParked(ctx context.Context, ids []string) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for _, id := range ids {
		if e, ok := s.byID[id]; ok && e.parked() && s.delete(id) {
			n++
		}
	}
	return n, nil
}

// HoldInstance takes instance for the caller until release is called or the store is closed.
// A memory store lives in one process, so it detects a second holder in that process only.
func (s *store) HoldInstance(ctx context.Context, instance string) (func() error, error) {
	if err := validInstance(instance); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if s.held[instance] {
		return nil, fmt.Errorf("%w: %q", persistence.ErrInstanceInUse, instance)
	}
	s.held[instance] = true
	released := false
	return func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !released {
			released = true
			delete(s.held, instance)
		}
		return nil
	}, nil
}

// ClaimDueAs claims as ClaimDue does, recording instance as the holder.
func (s *store) ClaimDueAs(ctx context.Context, instance string, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if err := validInstance(instance); err != nil {
		return nil, err
	}
	return s.claim(ctx, instance, now, limit, lease)
}

// ReleaseClaimsOf makes the timeouts instance claimed claimable again from their due time.
func (s *store) ReleaseClaimsOf(ctx context.Context, instance string) (int, error) {
	if err := validInstance(instance); err != nil {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.byID {
		// Only live claims: one given back (Release) or whose holder changed is no longer its.
		if e.claimedBy != instance || e.parked() || e.hidden() || e.availableAt.Equal(e.timeout.Due) {
			continue
		}
		e.claimedBy = ""
		e.availableAt = e.timeout.Due
		heap.Fix(&s.queue, e.index)
		n++
	}
	return n, nil
}

func validInstance(instance string) error {
	switch {
	case instance == "":
		return fmt.Errorf("%w: the instance name is empty", persistence.ErrInvalidTimeout)
	case len(instance) > persistence.MaxIDLength:
		return fmt.Errorf("%w: the instance name is longer than %d bytes", persistence.ErrInvalidTimeout, persistence.MaxIDLength)
	}
	return nil
}
