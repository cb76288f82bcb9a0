// Package faultstore wraps a persistence.Store so tests can make it fail on demand, as a database
// outage would.
package faultstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// ErrOutage is what a failing Store returns.
var ErrOutage = errors.New("faultstore: simulated storage outage")

var _ persistence.Store = (*Store)(nil)

// Store passes every call to the wrapped store unless it is failing or hanging.
type Store struct {
	inner   persistence.Store
	failing atomic.Bool
	calls   atomic.Int64

	mu      sync.Mutex
	hanging chan struct{} // closed by Recover; nil while calls go through
}

// Wrap returns a healthy wrapper around s.
func Wrap(s persistence.Store) *Store { return &Store{inner: s} }

// Fail makes every call fail until Recover.
func (s *Store) Fail() { s.failing.Store(true) }

// Hang makes every call block, as a call over a network that drops its packets does, until its
// context is done (it then returns the context's error) or Recover.
func (s *Store) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hanging == nil {
		s.hanging = make(chan struct{})
	}
}

// Recover ends the outage: failing calls succeed again, hanging ones go through.
func (s *Store) Recover() {
	s.failing.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hanging != nil {
		close(s.hanging)
		s.hanging = nil
	}
}

// FailedCalls counts calls refused during outages.
func (s *Store) FailedCalls() int64 { return s.calls.Load() }

func (s *Store) fault(ctx context.Context) error {
	if s.failing.Load() {
		s.calls.Add(1)
		return ErrOutage
	}
	s.mu.Lock()
	hanging := s.hanging
	s.mu.Unlock()
	if hanging == nil {
		return nil
	}
	s.calls.Add(1)
	select {
	case <-hanging:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) Store(ctx context.Context, t persistence.Timeout) (bool, error) {
	if err := s.fault(ctx); err != nil {
		return false, err
	}
	return s.inner.Store(ctx, t)
}

func (s *Store) Next(ctx context.Context) (time.Time, bool, error) {
	if err := s.fault(ctx); err != nil {
		return time.Time{}, false, err
	}
	return s.inner.Next(ctx)
}

func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if err := s.fault(ctx); err != nil {
		return nil, err
	}
	return s.inner.ClaimDue(ctx, now, limit, lease)
}

func (s *Store) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	if err := s.fault(ctx); err != nil {
		return persistence.Timeout{}, err
	}
	return s.inner.Peek(ctx, id)
}

func (s *Store) Remove(ctx context.Context, id string) (bool, error) {
	if err := s.fault(ctx); err != nil {
		return false, err
	}
	return s.inner.Remove(ctx, id)
}

func (s *Store) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	if err := s.fault(ctx); err != nil {
		return false, err
	}
	return s.inner.IncrementFailureCount(ctx, id)
}

func (s *Store) Cancel(ctx context.Context, id string) (bool, error) {
	if err := s.fault(ctx); err != nil {
		return false, err
	}
	return s.inner.Cancel(ctx, id)
}

func (s *Store) CancelByOwner(ctx context.Context, owner string) (int, error) {
	if err := s.fault(ctx); err != nil {
		return 0, err
	}
	return s.inner.CancelByOwner(ctx, owner)
}

// Close closes the wrapped store.
func (s *Store) Close() error { return s.inner.Close() }
