package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Bounds of one statement of a batch call. maxIn ids make 500 of the 65,535 parameters a prepared
// statement may take (an INSERT's 500 rows take 4,000); maxInsertBytes keeps one INSERT far below
// max_allowed_packet (16 MiB by default on MariaDB): larger batches take more statements, in one
// transaction all the same. A single timeout larger than that still goes alone, as Store sends it.
const (
	maxIn          = 500
	maxInsertBytes = 4 << 20
)

// batchAttempts bounds how often a batch transaction is run again after InnoDB chose it as a
// deadlock victim.
const batchAttempts = 5

// batchRow is one timeout of a StoreMany, with its columns as they are sent.
type batchRow struct {
	id, due  string
	t        persistence.Timeout
	payload  []byte
	metadata []byte
}

func (r batchRow) size() int {
	return len(r.payload) + len(r.metadata) + len(r.t.Destination) + len(r.t.Owner) + len(r.id)
}

// StoreMany keeps the timeouts whose ids are not stored yet, in one transaction and one commit,
// and returns those ids. It stores none when any of them is invalid. It looks up which ids are
// stored, then inserts the others in id order, so that overlapping batches wait for each other
// rather than deadlock; when a concurrent caller inserted one of them meanwhile, it looks again.
func (s *Store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	rows := make([]batchRow, 0, len(ts))
	seen := make(map[string]struct{}, len(ts))
	for _, t := range ts {
		due, err := validateTimeout(t)
		if err != nil {
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
		rows = append(rows, batchRow{id: t.ID, due: due, t: t, payload: payload, metadata: persistence.EncodeMetadata(t.Metadata)})
	}
	slices.SortFunc(rows, func(a, b batchRow) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}

	var inserted []string
	err := s.inTransaction(ctx, func(tx *sql.Tx) error {
		stored, err := s.storedIDs(ctx, tx, ids, false)
		if err != nil {
			return err
		}
		inserted = inserted[:0]
		fresh := make([]batchRow, 0, len(rows))
		for _, r := range rows {
			if _, ok := stored[r.id]; !ok {
				fresh = append(fresh, r)
			}
		}
		for len(fresh) > 0 {
			n, bytes := 1, fresh[0].size()
			for n < len(fresh) && n < maxIn && bytes+fresh[n].size() <= maxInsertBytes {
				bytes += fresh[n].size()
				n++
			}
			err := s.insert(ctx, tx, fresh[:n])
			if isServerError(err, errDupEntry) {
				// Another caller committed one of these ids since the look: the server undid this
				// statement alone, the transaction goes on. Look again and insert the others.
				if fresh, err = s.withoutStored(ctx, tx, fresh, n); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			for _, r := range fresh[:n] {
				inserted = append(inserted, r.id)
			}
			fresh = fresh[n:]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: store %d timeouts: %w", len(ts), err)
	}
	return inserted, nil
}

// withoutStored returns rows without those of their first n that are stored now. It fails with
// ER_DUP_ENTRY when it finds none stored, so that a duplicate it cannot see (none should exist)
// ends the transaction rather than repeating it forever.
func (s *Store) withoutStored(ctx context.Context, tx *sql.Tx, rows []batchRow, n int) ([]batchRow, error) {
	ids := make([]string, n)
	for i, r := range rows[:n] {
		ids[i] = r.id
	}
	stored, err := s.storedIDs(ctx, tx, ids, false)
	if err != nil {
		return nil, err
	}
	if len(stored) == 0 {
		return nil, &gomysql.MySQLError{Number: errDupEntry, Message: "a duplicate id among the batch's was not found stored"}
	}
	out := make([]batchRow, 0, len(rows)-len(stored))
	for _, r := range rows {
		if _, ok := stored[r.id]; !ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// insert inserts rows with one statement.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, rows []batchRow) error {
	args := make([]any, 0, 8*len(rows))
	for _, r := range rows {
		args = append(args, []byte(r.id), []byte(r.t.Destination), r.due, r.due, []byte(r.t.Owner), r.payload,
			r.metadata, r.t.FailureCount)
	}
	_, err := tx.ExecContext(ctx, s.q.storeMany(len(rows)), args...)
	return err
}

// storedIDs returns which of ids (sorted) are stored, maxIn ids per statement. With lock, it locks
// their rows until the transaction ends.
func (s *Store) storedIDs(ctx context.Context, tx *sql.Tx, ids []string, lock bool) (map[string]struct{}, error) {
	found := make(map[string]struct{}, len(ids))
	for start := 0; start < len(ids); start += maxIn {
		chunk := ids[start:min(len(ids), start+maxIn)]
		query := s.q.idsIn(len(chunk))
		if lock {
			query += ` FOR UPDATE`
		}
		rows, err := tx.QueryContext(ctx, query, idArgs(chunk)...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return nil, errors.Join(err, rows.Close())
			}
			found[id] = struct{}{}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// PeekMany returns the stored timeouts among ids, claimed or not, one statement per maxIn ids;
// ids not stored are left out. It fails with persistence.ErrCorruptMetadata when any of them
// cannot be read.
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
	rows, err := s.db.QueryContext(ctx, s.q.peekIn(len(ids)), idArgs(ids)...)
	if err != nil {
		return nil, fmt.Errorf("mysql: peek %d timeouts: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t        persistence.Timeout
			due      utcTime
			metadata []byte
		)
		if err := rows.Scan(&t.ID, &t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount); err != nil {
			return nil, fmt.Errorf("mysql: peek %d timeouts: %w", len(ids), err)
		}
		t.Due = due.Time
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("mysql: peek %q: %w", t.ID, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: peek %d timeouts: %w", len(ids), err)
	}
	return out, nil
}

// RemoveMany deletes the timeouts with those ids in one transaction and one commit, and returns
// the ids it deleted. MySQL has no DELETE ... RETURNING, so it first locks the rows it finds (in
// id order, as a claim or another RemoveMany would not deadlock with it) and deletes exactly those.
func (s *Store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var removed []string
	err := s.inTransaction(ctx, func(tx *sql.Tx) error {
		found, err := s.storedIDs(ctx, tx, sorted, true)
		if err != nil {
			return err
		}
		removed = removed[:0]
		for _, id := range sorted {
			if _, ok := found[id]; ok {
				removed = append(removed, id)
			}
		}
		for start := 0; start < len(removed); start += maxIn {
			chunk := removed[start:min(len(removed), start+maxIn)]
			if _, err := tx.ExecContext(ctx, s.q.deleteIn(len(chunk)), idArgs(chunk)...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: remove %d timeouts: %w", len(ids), err)
	}
	return removed, nil
}

// inTransaction runs run in a READ COMMITTED transaction (no gap locks, as in a claim) and commits
// it, running it again after a deadlock (or a duplicate id withoutStored could not place), up to
// batchAttempts times.
func (s *Store) inTransaction(ctx context.Context, run func(tx *sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.runTransaction(ctx, run)
		if err == nil || attempt == batchAttempts || ctx.Err() != nil ||
			!(isServerError(err, errLockDeadlock) || isServerError(err, errDupEntry)) {
			return err
		}
	}
}

func (s *Store) runTransaction(ctx context.Context, run func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := run(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// idArgs returns ids as the binary strings the id column holds.
func idArgs(ids []string) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = []byte(id)
	}
	return args
}
