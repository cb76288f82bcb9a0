package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// defaultListLimit is persistence.ListOptions' documented default.
const defaultListLimit = 100

// Stats counts the stored timeouts, claimed or not, and their earliest and latest due times. It
// reads the whole table: it is for operators, not for a poll loop.
func (s *Store) Stats(ctx context.Context) (persistence.Stats, error) {
	var (
		st               persistence.Stats
		earliest, latest utcTime
	)
	if err := s.db.QueryRowContext(ctx, s.q.stats).Scan(&st.Pending, &earliest, &latest); err != nil {
		return persistence.Stats{}, fmt.Errorf("sqlserver: stats: %w", err)
	}
	st.Earliest, st.Latest = earliest.Time, latest.Time
	return st, nil
}

// List returns timeouts earliest due first, without their payloads.
func (s *Store) List(ctx context.Context, opts persistence.ListOptions) ([]persistence.Timeout, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	if opts.Owner != "" && !storable(opts.Owner) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sqlserver: list: %w", err)
		}
		return nil, nil // no timeout has that owner (see storable)
	}
	var (
		rows *sql.Rows
		err  error
	)
	if opts.Owner != "" {
		rows, err = s.db.QueryContext(ctx, s.q.listByOwner, sql.Named("limit", int64(limit)), sql.Named("owner", opts.Owner))
	} else {
		rows, err = s.db.QueryContext(ctx, s.q.list, sql.Named("limit", int64(limit)))
	}
	if err != nil {
		return nil, fmt.Errorf("sqlserver: list: %w", err)
	}
	defer rows.Close()
	var list []persistence.Timeout
	for rows.Next() {
		var (
			t        persistence.Timeout
			due      utcTime
			metadata []byte
		)
		if err := rows.Scan(&t.ID, &t.Destination, &due, &t.Owner, &metadata, &t.FailureCount); err != nil {
			return nil, fmt.Errorf("sqlserver: list: %w", err)
		}
		t.Due = due.Time
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("sqlserver: list %q: %w", t.ID, err)
		}
		list = append(list, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlserver: list: %w", err)
	}
	return list, nil
}
