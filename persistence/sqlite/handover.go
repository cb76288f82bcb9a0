package sqlite

import (
	"context"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Survey describes the timeouts due at or after from. It reads on the reader pool.
func (s *Store) Survey(ctx context.Context, from time.Time) (persistence.Survey, error) {
	return s.c().Survey(ctx, from)
}

// Hide claims until mark up to limit timeouts due at or after from that no poller holds at now,
// in one change of the writer.
func (s *Store) Hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]persistence.Timeout, error) {
	return s.c().Hide(ctx, now, from, limit, mark)
}

// Release makes the timeouts with these ids claimable again from their due time: one change of
// the writer per maxIn ids.
func (s *Store) Release(ctx context.Context, ids []string) (int, error) {
	return s.c().Release(ctx, ids)
}
