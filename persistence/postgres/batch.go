package postgres

import (
	"context"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// StoreMany keeps, in one statement and one commit, the timeouts whose ids are not stored yet and
// returns those ids. It stores none when any of them is invalid. Rows are inserted in id order,
// so that batches holding the same ids in other orders wait for each other instead of
// deadlocking.
func (s *Store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	return s.c().StoreMany(ctx, ts)
}

// PeekMany returns the stored timeouts among ids in one statement; ids not stored are left out.
// It fails with persistence.ErrCorruptMetadata when any of them cannot be read.
func (s *Store) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	return s.c().PeekMany(ctx, ids)
}

// RemoveMany deletes the timeouts with those ids in one statement, one commit, and returns the
// ids it deleted.
func (s *Store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	return s.c().RemoveMany(ctx, ids)
}
