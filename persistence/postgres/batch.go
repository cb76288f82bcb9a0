package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// StoreMany keeps, in one statement and one commit, the timeouts whose ids are not stored yet and
// returns those ids. It stores none when any of them is invalid. Rows are inserted in id order,
// so that batches holding the same ids in other orders wait for each other instead of
// deadlocking.
func (s *Store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	var (
		ids, destinations, owners []string
		dues                      []time.Time
		payloads, metadata        [][]byte
		failures                  []int32
	)
	for _, t := range ts {
		if err := validateTimeout(t); err != nil {
			return nil, err
		}
		payload := t.Payload
		if payload == nil {
			payload = []byte{}
		}
		ids = append(ids, t.ID)
		destinations = append(destinations, t.Destination)
		dues = append(dues, dueMicros(t.Due))
		owners = append(owners, t.Owner)
		payloads = append(payloads, payload)
		metadata = append(metadata, persistence.EncodeMetadata(t.Metadata))
		failures = append(failures, int32(t.FailureCount))
	}
	rows, err := s.db.QueryContext(ctx, `INSERT INTO `+s.q.table+` (id, destination, due, available_at, owner, payload, metadata, failure_count)
SELECT id, destination, due, due, owner, payload, metadata, failure_count
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bytea[], $6::bytea[], $7::int[])
	AS t(id, destination, due, owner, payload, metadata, failure_count)
ORDER BY id
ON CONFLICT (id) DO NOTHING RETURNING id`, ids, destinations, dues, owners, payloads, metadata, failures)
	if err != nil {
		return nil, fmt.Errorf("postgres: store %d timeouts: %w", len(ts), err)
	}
	return scanIDs(rows, "store", len(ts))
}

// PeekMany returns the stored timeouts among ids in one statement; ids not stored are left out.
// It fails with persistence.ErrCorruptMetadata when any of them cannot be read.
func (s *Store) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx,
		`SELECT id, destination, due, owner, payload, metadata, failure_count FROM `+s.q.table+` WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: peek %d timeouts: %w", len(ids), err)
	}
	defer rows.Close()
	out := make([]persistence.Timeout, 0, len(ids))
	for rows.Next() {
		var (
			t        persistence.Timeout
			metadata []byte
		)
		if err := rows.Scan(&t.ID, &t.Destination, &t.Due, &t.Owner, &t.Payload, &metadata, &t.FailureCount); err != nil {
			return nil, fmt.Errorf("postgres: peek %d timeouts: %w", len(ids), err)
		}
		t.Due = t.Due.UTC()
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("postgres: peek %q: %w", t.ID, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: peek %d timeouts: %w", len(ids), err)
	}
	return out, nil
}

// RemoveMany deletes the timeouts with those ids in one statement, one commit, and returns the
// ids it deleted.
func (s *Store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, `DELETE FROM `+s.q.table+` WHERE id = ANY($1) RETURNING id`, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: remove %d timeouts: %w", len(ids), err)
	}
	return scanIDs(rows, "remove", len(ids))
}

// scanIDs reads the ids a RETURNING id statement returned.
func scanIDs(rows *sql.Rows, what string, n int) ([]string, error) {
	defer rows.Close()
	out := make([]string, 0, n)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("postgres: %s %d timeouts: %w", what, n, err)
		}
		out = append(out, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("postgres: %s %d timeouts: %w", what, n, err)
	}
	return out, nil
}
