package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// defaultListLimit is persistence.ListOptions' documented default.
const defaultListLimit = 100

// Stats counts the stored timeouts, claimed or not, and their earliest and latest due times.
func (s *Store) Stats(ctx context.Context) (persistence.Stats, error) {
	var (
		st               persistence.Stats
		earliest, latest sql.NullInt64
	)
	if err := s.reader.QueryRowContext(ctx, s.q.stats).Scan(&st.Pending, &earliest, &latest); err != nil {
		return persistence.Stats{}, fmt.Errorf("sqlite: stats: %w", err)
	}
	if earliest.Valid {
		st.Earliest = fromMicros(earliest.Int64)
	}
	if latest.Valid {
		st.Latest = fromMicros(latest.Int64)
	}
	return st, nil
}

// List returns timeouts earliest due first, without their payloads.
func (s *Store) List(ctx context.Context, opts persistence.ListOptions) ([]persistence.Timeout, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	var (
		rows *sql.Rows
		err  error
	)
	if opts.Owner != "" {
		rows, err = s.reader.QueryContext(ctx, s.q.listByOwner, opts.Owner, limit)
	} else {
		rows, err = s.reader.QueryContext(ctx, s.q.list, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	defer rows.Close()
	var list []persistence.Timeout
	for rows.Next() {
		var (
			t        persistence.Timeout
			due      int64
			metadata []byte
		)
		if err := rows.Scan(&t.ID, &t.Destination, &due, &t.Owner, &metadata, &t.FailureCount); err != nil {
			return nil, fmt.Errorf("sqlite: list: %w", err)
		}
		t.Due = fromMicros(due)
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("sqlite: list %q: %w", t.ID, err)
		}
		list = append(list, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	return list, nil
}
