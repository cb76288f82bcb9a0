package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// CountDue counts the timeouts that are not parked and are due before each of bounds
// (persistence.DueCounter), in one statement that reads the (due, id) index as far as the
// latest bound, less the parked timeouts from their partial index: it reads as many index
// entries as there are timeouts due before the latest bound, and none of the table's rows where
// the visibility map is current (after a vacuum).
func (s *Store) CountDue(ctx context.Context, bounds []time.Time) ([]int, error) {
	if err := sqlstore.Opened(s.c()); err != nil {
		return nil, err
	}
	sorted, err := sqlstore.SortBounds(bounds)
	if err != nil {
		return nil, fmt.Errorf("postgres: count due: %w", err)
	}
	if len(sorted) == 0 {
		return []int{}, nil
	}
	rows, err := sqlstore.DB(s.core).QueryContext(ctx, s.q.counts.due, sorted, sorted[len(sorted)-1])
	if err != nil {
		return nil, fmt.Errorf("postgres: count due: %w", err)
	}
	defer rows.Close()
	// in[b] is how many are due in bucket b: before sorted[0] for 0, from sorted[b-1] to
	// sorted[b] for the others.
	in := make([]int, len(sorted))
	for rows.Next() {
		var (
			parked  bool
			bucket  int
			counted int
		)
		if err := rows.Scan(&parked, &bucket, &counted); err != nil {
			return nil, fmt.Errorf("postgres: count due: %w", err)
		}
		if bucket < 0 || bucket >= len(in) {
			return nil, fmt.Errorf("postgres: count due: bucket %d of %d bounds", bucket, len(sorted))
		}
		if parked {
			counted = -counted
		}
		in[bucket] += counted
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: count due: %w", err)
	}
	counts := make([]int, len(sorted))
	total := 0
	for i, n := range in {
		total += n
		counts[i] = total
	}
	return sqlstore.CountsOf(bounds, sorted, counts), nil
}
