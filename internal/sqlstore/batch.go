package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// batchAttempts bounds how often a batch or Schedule transaction is run again after an error
// Dialect.Retry accepts (a deadlock).
const batchAttempts = 5

// StoreMany keeps the timeouts whose ids are not stored yet and returns those ids. It stores none
// when any of them is invalid. Rows go in id order, so that batches holding the same ids in other
// orders wait for each other instead of deadlocking.
func (s *Store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, nil
	}
	rows := make([]Row, 0, len(ts))
	seen := make(map[string]struct{}, len(ts))
	for _, t := range ts {
		if err := s.validate(t, true); err != nil {
			return nil, err
		}
		if _, dup := seen[t.ID]; dup {
			continue // the first is stored; the others would find it stored
		}
		seen[t.ID] = struct{}{}
		payload := t.Payload
		if payload == nil {
			payload = []byte{}
		}
		rows = append(rows, Row{T: t, Due: RoundUpMicro(t.Due), Payload: payload, Metadata: persistence.EncodeMetadata(t.Metadata)})
	}
	slices.SortFunc(rows, func(a, b Row) int { return strings.Compare(a.T.ID, b.T.ID) })
	size := s.d.Own.MaxStoreRows
	if size <= 0 {
		size = len(rows)
	}
	var inserted []string
	err := s.batch(ctx, len(rows) > size, func(ctx context.Context, q Querier) error {
		inserted = inserted[:0] // run may be called again
		for chunk := range slices.Chunk(rows, size) {
			ids, err := s.storeRows(ctx, q, chunk)
			if err != nil {
				return err
			}
			inserted = append(inserted, ids...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: store %d timeouts: %w", s.d.Name, len(ts), err)
	}
	return inserted, nil
}

// storeRows inserts rows as Own.StoreRows does, by default with a Store statement each.
func (s *Store) storeRows(ctx context.Context, q Querier, rows []Row) ([]string, error) {
	if s.d.Own.StoreRows != nil {
		return s.d.Own.StoreRows(ctx, q, rows)
	}
	var inserted []string
	for _, r := range rows {
		n, err := s.count(ctx, q, s.st.Store.SQL, s.st.Store.Args(StoreParams{ID: r.T.ID, Destination: r.T.Destination,
			Owner: r.T.Owner, Due: r.Due, Payload: r.Payload, Metadata: r.Metadata, FailureCount: r.T.FailureCount}))
		if err != nil {
			return nil, err
		}
		if n == 1 {
			inserted = append(inserted, r.T.ID)
		}
	}
	return inserted, nil
}

// PeekMany returns the stored timeouts among ids, claimed or not, one statement per MaxIn ids;
// ids not stored are left out. It fails with persistence.ErrCorruptMetadata when any of them
// cannot be read.
func (s *Store) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: peek %d timeouts: %w", s.d.Name, len(ids), err)
		}
	}
	ids = s.keys(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]persistence.Timeout, 0, len(ids))
	for chunk := range slices.Chunk(ids, s.maxIn(len(ids))) {
		var err error
		if out, err = s.peekIn(ctx, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) peekIn(ctx context.Context, ids []string, out []persistence.Timeout) ([]persistence.Timeout, error) {
	query, args := s.d.Bind.in(s.d.SQL.PeekIn, ids)
	rows, err := s.d.Run.Reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: peek %d timeouts: %w", s.d.Name, len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := ScanTimeout(s, rows)
		if err != nil {
			return nil, fmt.Errorf("%s: peek %d timeouts: %w", s.d.Name, len(ids), err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: peek %d timeouts: %w", s.d.Name, len(ids), err)
	}
	return out, nil
}

// RemoveMany deletes the timeouts with those ids and returns the ids it deleted: one statement
// per MaxIn ids, in one transaction and one commit when there are more.
func (s *Store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	all := len(ids)
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: remove %d timeouts: %w", s.d.Name, all, err)
		}
	}
	ids = s.keys(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	size := s.maxIn(len(ids))
	var removed []string
	err := s.batch(ctx, len(ids) > size, func(ctx context.Context, q Querier) error {
		removed = removed[:0] // run may be called again
		for chunk := range slices.Chunk(ids, size) {
			var (
				got []string
				err error
			)
			if s.d.Own.RemoveIDs != nil {
				got, err = s.d.Own.RemoveIDs(ctx, q, chunk)
			} else {
				query, args := s.d.Bind.in(s.d.SQL.RemoveIn, chunk)
				got, err = QueryIDs(ctx, q, query, args)
			}
			if err != nil {
				return err
			}
			removed = append(removed, got...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: remove %d timeouts: %w", s.d.Name, all, err)
	}
	return removed, nil
}

// batch runs a batch's statements, in one transaction when tx or Dialect.BatchTx, and runs them
// again after an error Dialect.Retry accepts, up to batchAttempts times.
func (s *Store) batch(ctx context.Context, tx bool, run func(ctx context.Context, q Querier) error) error {
	return s.retry(ctx, func() error { return s.write(ctx, tx || s.d.Run.BatchTx, run) })
}

// retry runs a transaction, and again after an error Dialect.Retry accepts, up to batchAttempts
// times.
func (s *Store) retry(ctx context.Context, transaction func() error) error {
	for attempt := 1; ; attempt++ {
		err := transaction()
		if err == nil || attempt == batchAttempts || ctx.Err() != nil || s.d.Errors.Retry == nil || !s.d.Errors.Retry(err) {
			return err
		}
	}
}

// keys returns the ids that could be stored, sorted, each once, in a new slice.
func (s *Store) keys(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if s.d.Check.Storable == nil || s.d.Check.Storable(id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// maxIn is how many of n ids one statement takes.
func (s *Store) maxIn(n int) int {
	if s.d.Bind.MaxIn > 0 {
		return s.d.Bind.MaxIn
	}
	return max(n, 1)
}

// ScanTimeout reads id, destination, due, owner, payload, metadata, failure_count, key, parking
// reason.
func ScanTimeout(s *Store, rows interface{ Scan(...any) error }) (persistence.Timeout, error) {
	r := s.newRow()
	if err := rows.Scan(&r.t.ID, &r.t.Destination, &r.due, &r.t.Owner, &r.t.Payload, &r.metadata, &r.t.FailureCount, &r.t.Key, &r.t.Parked); err != nil {
		return persistence.Timeout{}, err
	}
	if err := r.finish(); err != nil {
		return persistence.Timeout{}, fmt.Errorf("timeout %q: %w", r.t.ID, err)
	}
	return r.t, nil
}
