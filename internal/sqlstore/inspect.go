package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Stats counts the stored timeouts, claimed or not, and their earliest and latest due times. It
// reads the whole table: it is for operators, not for a poll loop.
func (s *Store) Stats(ctx context.Context) (persistence.Stats, error) {
	if err := Opened(s); err != nil {
		return persistence.Stats{}, err
	}
	var (
		st               persistence.Stats
		earliest, latest = s.timeValue(), s.timeValue()
	)
	if err := queryRow(ctx, s.d.Reader, s.d.Queries.Stats, nil, &st.Pending, earliest, latest); err != nil {
		return persistence.Stats{}, fmt.Errorf("%s: stats: %w", s.d.Name, err)
	}
	st.Earliest, st.Latest = earliest.t, latest.t
	return st, nil
}

// List returns timeouts earliest due first, without their payloads.
func (s *Store) List(ctx context.Context, opts persistence.ListOptions) ([]persistence.Timeout, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	if opts.Owner != "" && s.d.Storable != nil && !s.d.Storable(opts.Owner) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: list: %w", s.d.Name, err)
		}
		return nil, nil // no timeout has that owner (see Dialect.Storable)
	}
	var (
		rows *sql.Rows
		err  error
	)
	if opts.Owner != "" {
		rows, err = s.d.Reader.QueryContext(ctx, s.d.Queries.ListByOwner, s.args(ownerLimit, s.d.Text(opts.Owner), int64(limit))...)
	} else {
		rows, err = s.d.Reader.QueryContext(ctx, s.d.Queries.List, s.args(limitParams, int64(limit))...)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: list: %w", s.d.Name, err)
	}
	defer rows.Close()
	var list []persistence.Timeout
	for rows.Next() {
		r := s.newRow()
		if err := rows.Scan(&r.t.ID, &r.t.Destination, &r.due, &r.t.Owner, &r.metadata, &r.t.FailureCount); err != nil {
			return nil, fmt.Errorf("%s: list: %w", s.d.Name, err)
		}
		if err := r.finish(); err != nil {
			return nil, fmt.Errorf("%s: list %q: %w", s.d.Name, r.t.ID, err)
		}
		list = append(list, r.t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list: %w", s.d.Name, err)
	}
	return list, nil
}
