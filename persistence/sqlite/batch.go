package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// maxIn bounds the ids of one IN list, far below SQLite's limit on bound parameters.
const maxIn = 500

// inList returns "?, ?, …)" for n ids and the ids as arguments.
func inList(ids []string) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return strings.Repeat("?, ", len(ids)-1) + "?)", args
}

// PeekMany returns the stored timeouts among ids, one statement per maxIn ids; ids not stored are
// left out.
func (s *Store) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	out := make([]persistence.Timeout, 0, len(ids))
	for start := 0; start < len(ids); start += maxIn {
		chunk := ids[start:min(len(ids), start+maxIn)]
		var err error
		if out, err = s.peekIn(ctx, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) peekIn(ctx context.Context, ids []string, out []persistence.Timeout) ([]persistence.Timeout, error) {
	list, args := inList(ids)
	rows, err := s.reader.QueryContext(ctx, s.q.peekIn+list, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: peek %d timeouts: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t        persistence.Timeout
			due      int64
			metadata []byte
		)
		if err := rows.Scan(&t.ID, &t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount); err != nil {
			return nil, fmt.Errorf("sqlite: peek %d timeouts: %w", len(ids), err)
		}
		t.Due = fromMicros(due)
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("sqlite: peek %q: %w", t.ID, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: peek %d timeouts: %w", len(ids), err)
	}
	return out, nil
}

// StoreMany keeps the timeouts whose ids are not stored yet, in one change of the writer, and
// returns those ids. It stores none when any of them is invalid.
func (s *Store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	for _, t := range ts {
		if err := t.Validate(); err != nil {
			return nil, err
		}
	}
	var inserted []string
	err := s.writer.do(ctx, inOneTransaction(func(ctx context.Context, db execer) error {
		inserted = inserted[:0] // run may be called twice (see change)
		for _, t := range ts {
			payload := t.Payload
			if payload == nil {
				payload = []byte{}
			}
			due := dueMicros(t.Due)
			n, err := rowsAffected(db.ExecContext(ctx, s.q.store,
				t.ID, t.Destination, due, due, t.Owner, payload, persistence.EncodeMetadata(t.Metadata), t.FailureCount))
			if err != nil {
				return err
			}
			if n == 1 {
				inserted = append(inserted, t.ID)
			}
		}
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("sqlite: store %d timeouts: %w", len(ts), err)
	}
	return inserted, nil
}

// RemoveMany deletes the timeouts with those ids in one change of the writer, committed with
// whatever else is being written, and returns the ids it deleted.
func (s *Store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var removed []string
	err := s.writer.do(ctx, inOneTransaction(func(ctx context.Context, db execer) error {
		removed = removed[:0] // run may be called twice (see change)
		for start := 0; start < len(ids); start += maxIn {
			list, args := inList(ids[start:min(len(ids), start+maxIn)])
			rows, err := db.QueryContext(ctx, s.q.deleteIn+list+` RETURNING id`, args...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return errors.Join(err, rows.Close())
				}
				removed = append(removed, id)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("sqlite: remove %d timeouts: %w", len(ids), err)
	}
	return removed, nil
}

// inOneTransaction makes a change of many statements commit once: the writer runs a change that
// is alone in its group on the pool, where each statement would commit by itself.
func inOneTransaction(run func(ctx context.Context, db execer) error) func(ctx context.Context, db execer) error {
	return func(ctx context.Context, db execer) error {
		pool, alone := db.(*sql.DB)
		if !alone {
			return run(ctx, db) // in the group's transaction
		}
		tx, err := pool.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := run(ctx, tx); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		return tx.Commit()
	}
}
