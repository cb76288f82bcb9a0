package sqlserver

import (
	"context"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Stats counts the stored timeouts, claimed or not, and their earliest and latest due times. It
// reads the whole table: it is for operators, not for a poll loop.
func (s *Store) Stats(ctx context.Context) (persistence.Stats, error) { return s.c().Stats(ctx) }

// List returns timeouts earliest due first, without their payloads. An owner no timeout could
// have is looked up in no query.
func (s *Store) List(ctx context.Context, opts persistence.ListOptions) ([]persistence.Timeout, error) {
	return s.c().List(ctx, opts)
}
