package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// PeekMany returns the stored timeouts among ids, looked up on one connection with one prepared
// statement; ids not stored are left out.
func (s *Store) PeekMany(ctx context.Context, ids []string) (out []persistence.Timeout, err error) {
	if len(ids) == 0 {
		return nil, nil
	}
	conn, err := s.reader.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: peek %d timeouts: %w", len(ids), err)
	}
	defer func() { err = errors.Join(err, conn.Close()) }()
	stmt, err := conn.PrepareContext(ctx, s.q.peek)
	if err != nil {
		return nil, fmt.Errorf("sqlite: peek %d timeouts: %w", len(ids), err)
	}
	defer func() { err = errors.Join(err, stmt.Close()) }()
	out = make([]persistence.Timeout, 0, len(ids))
	for _, id := range ids {
		t := persistence.Timeout{ID: id}
		var (
			due      int64
			metadata []byte
		)
		err := stmt.QueryRowContext(ctx, id).Scan(&t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: peek %q: %w", id, err)
		}
		t.Due = fromMicros(due)
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("sqlite: peek %q: %w", id, err)
		}
		out = append(out, t)
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
		for _, id := range ids {
			n, err := rowsAffected(db.ExecContext(ctx, s.q.delete, id))
			if err != nil {
				return err
			}
			if n > 0 {
				removed = append(removed, id)
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
