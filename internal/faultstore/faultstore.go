// Package faultstore wraps a persistence.Store so tests can make it fail on demand, as a database
// outage would.
package faultstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// ErrOutage is what a failing Store returns.
var ErrOutage = errors.New("faultstore: simulated storage outage")

var _ persistence.Store = (*Store)(nil)

// Store passes every call to the wrapped store unless it is failing.
type Store struct {
	inner   persistence.Store
	failing atomic.Bool
	calls   atomic.Int64
}

// Wrap returns a healthy wrapper around s.
func Wrap(s persistence.Store) *Store { return &Store{inner: s} }

// Fail makes every call fail until Recover.
func (s *Store) Fail() { s.failing.Store(true) }

// Recover ends the outage.
func (s *Store) Recover() { s.failing.Store(false) }

// FailedCalls counts calls refused during outages.
func (s *Store) FailedCalls() int64 { return s.calls.Load() }

func (s *Store) fault() error {
	if s.failing.Load() {
		s.calls.Add(1)
		return ErrOutage
	}
	return nil
}

func (s *Store) Store(ctx context.Context, t persistence.Timeout) (bool, error) {
	if err := s.fault(); err != nil {
		return false, err
	}
	return s.inner.Store(ctx, t)
}

func (s *Store) Next(ctx context.Context) (time.Time, bool, error) {
	if err := s.fault(); err != nil {
		return time.Time{}, false, err
	}
	return s.inner.Next(ctx)
}

func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if err := s.fault(); err != nil {
		return nil, err
	}
	return s.inner.ClaimDue(ctx, now, limit, lease)
}

func (s *Store) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	if err := s.fault(); err != nil {
		return persistence.Timeout{}, err
	}
	return s.inner.Peek(ctx, id)
}

func (s *Store) Remove(ctx context.Context, id string) (bool, error) {
	if err := s.fault(); err != nil {
		return false, err
	}
	return s.inner.Remove(ctx, id)
}

func (s *Store) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	if err := s.fault(); err != nil {
		return false, err
	}
	return s.inner.IncrementFailureCount(ctx, id)
}

func (s *Store) Cancel(ctx context.Context, id string) (bool, error) {
	if err := s.fault(); err != nil {
		return false, err
	}
	return s.inner.Cancel(ctx, id)
}

func (s *Store) CancelByOwner(ctx context.Context, owner string) (int, error) {
	if err := s.fault(); err != nil {
		return 0, err
	}
	return s.inner.CancelByOwner(ctx, owner)
}

// Close closes the wrapped store.
func (s *Store) Close() error { return s.inner.Close() }
