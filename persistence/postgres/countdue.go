package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// CountDue counts the timeouts that are not parked and are due before each of bounds
// (persistence.DueCounter), in one statement, as Stats counts DueNow: the dues of the minutes
// before each bound's, from the table of timeouts due per minute the count triggers keep, and
// the timeouts due in the bound's own minute before it, from the (due, id) index less the
// parked ones. It reads one row per minute that has timeouts due before the latest bound, and
// the timeouts due in one minute per bound, however many are due.
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
	// The minute of each bound, as the triggers truncate dues: in UTC.
	minutes := make([]time.Time, len(sorted))
	for i, b := range sorted {
		minutes[i] = b.UTC().Truncate(time.Minute)
	}
	db := sqlstore.DB(s.core)
	if err := s.q.counts.foldUnlessFresh(ctx, db); err != nil {
		return nil, fmt.Errorf("postgres: count due: %w", err)
	}
	rows, err := db.QueryContext(ctx, s.q.counts.due, sorted, minutes)
	if err != nil {
		return nil, fmt.Errorf("postgres: count due: %w", notSetUp(err))
	}
	defer rows.Close()
	// before[b] sums the dues of the minutes before bound b's and not before bound b-1's;
	// within[b] counts those due in bound b's minute before it.
	before, within := make([]int, len(sorted)), make([]int, len(sorted))
	for rows.Next() {
		var (
			bucket, n int
			inMinute  bool
		)
		if err := rows.Scan(&bucket, &n, &inMinute); err != nil {
			return nil, fmt.Errorf("postgres: count due: %w", err)
		}
		if bucket < 0 || bucket >= len(sorted) {
			return nil, fmt.Errorf("postgres: count due: bucket %d of %d bounds", bucket, len(sorted))
		}
		if inMinute {
			within[bucket] = n
		} else {
			before[bucket] += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: count due: %w", err)
	}
	counts := make([]int, len(sorted))
	total := 0
	for i := range sorted {
		total += before[i]
		counts[i] = total + within[i]
	}
	return sqlstore.CountsOf(bounds, sorted, counts), nil
}
