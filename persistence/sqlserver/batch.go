package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Bounds of one statement of a batch call, below the 2,100 parameters a request may carry:
// maxStoreRows rows of 7 parameters, maxIn ids.
const (
	maxStoreRows = 250
	maxIn        = 500
)

// errDeadlock is the error of a transaction SQL Server chose as a deadlock victim and rolled back.
const errDeadlock = 1205

// batchAttempts bounds how often a batch is run again after a deadlock.
const batchAttempts = 5

// storeManyColumns are the columns of the rows StoreMany sends, in order, named as the
// statement's parameters are (with the row's index appended).
var storeManyColumns = []string{"id", "destination", "state", "due", "headers", "failureCount", "owner"}

// storeMany inserts the rows among n that are not stored yet and returns their ids: Store's
// statement for n rows at once, a table value constructor instead of parameters.
func (q queries) storeMany(n int) string {
	rows := make([]string, n)
	for i := range n {
		params := make([]string, len(storeManyColumns))
		for j, c := range storeManyColumns {
			params[j] = "@" + c + strconv.Itoa(i)
		}
		rows[i] = "\t(" + strings.Join(params, ", ") + ")"
	}
	return fmt.Sprintf(`INSERT INTO %[1]s (Id, Destination, State, Time, Headers, RetryCount, AvailableAt, Owner)
OUTPUT inserted.Id
SELECT fresh.Id, fresh.Destination, fresh.State, %[2]s, fresh.Headers, fresh.RetryCount, %[2]s, fresh.Owner
FROM (VALUES
%[3]s
) AS fresh (Id, Destination, State, Due, Headers, RetryCount, Owner)
WHERE NOT EXISTS (SELECT 1 FROM %[1]s AS stored WHERE stored.Id = fresh.Id);`, q.table, toDateTime2("fresh.Due"), strings.Join(rows, ",\n"))
}

// idList returns "@id0, @id1, …" for n ids.
func idList(n int) string {
	params := make([]string, n)
	for i := range n {
		params[i] = "@id" + strconv.Itoa(i)
	}
	return strings.Join(params, ", ")
}

// peekMany reads the timeouts with n ids.
func (q queries) peekMany(n int) string {
	return fmt.Sprintf(`SELECT Id, Destination, %s, Owner, State, Headers, RetryCount FROM %s WHERE Id IN (%s)`,
		toUTC("Time"), q.table, idList(n))
}

// removeMany deletes the timeouts with n ids and returns the ids it deleted.
func (q queries) removeMany(n int) string {
	return fmt.Sprintf(`DELETE FROM %s
OUTPUT deleted.Id
WHERE Id IN (%s);`, q.table, idList(n))
}

// idArgs binds ids as @id0, @id1, ….
func idArgs(ids []string) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = sql.Named("id"+strconv.Itoa(i), id)
	}
	return args
}

// StoreMany keeps the timeouts whose ids are not stored yet and returns those ids: one statement
// per 250 timeouts, in one transaction and one commit when there are more. It stores none when
// any of them is invalid. A statement that meets the primary key (another caller stored one of
// its ids since NOT EXISTS looked) is undone alone and run again, and finds that id stored.
func (s *Store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	type row struct {
		t   persistence.Timeout
		due time.Time
	}
	rows := make([]row, 0, len(ts))
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
		rows = append(rows, row{t: t, due: due})
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.t.ID, b.t.ID) })

	var inserted []string
	err := s.batch(ctx, len(rows) > maxStoreRows, func(db queryer) error {
		inserted = inserted[:0]
		for start := 0; start < len(rows); start += maxStoreRows {
			chunk := rows[start:min(len(rows), start+maxStoreRows)]
			args := make([]any, 0, len(storeManyColumns)*len(chunk))
			for i, r := range chunk {
				payload := r.t.Payload
				if payload == nil {
					payload = []byte{}
				}
				n := strconv.Itoa(i)
				args = append(args,
					sql.Named("id"+n, r.t.ID),
					sql.Named("destination"+n, r.t.Destination),
					sql.Named("state"+n, payload),
					sql.Named("due"+n, utc(r.due)),
					sql.Named("headers"+n, persistence.EncodeMetadata(r.t.Metadata)),
					sql.Named("failureCount"+n, int64(r.t.FailureCount)),
					sql.Named("owner"+n, r.t.Owner),
				)
			}
			query := s.q.storeMany(len(chunk))
			// Each run that meets the primary key finds one more id stored: at most one run more
			// than the chunk has rows.
			for run := 0; ; run++ {
				ids, err := queryIDs(ctx, db, query, args)
				if isServerError(err, errDuplicateKey, errDuplicateKeyIndex) && run < len(chunk) {
					continue
				}
				if err != nil {
					return err
				}
				inserted = append(inserted, ids...)
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlserver: store %d timeouts: %w", len(ts), err)
	}
	return inserted, nil
}

// PeekMany returns the stored timeouts among ids, claimed or not, one statement per 500 distinct
// ids; ids not stored are left out. It fails with persistence.ErrCorruptMetadata when any of them cannot
// be read.
func (s *Store) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlserver: peek %d timeouts: %w", len(ids), err)
	}
	ids = storableIDs(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
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
	rows, err := s.db.QueryContext(ctx, s.q.peekMany(len(ids)), idArgs(ids)...)
	if err != nil {
		return nil, fmt.Errorf("sqlserver: peek %d timeouts: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t        persistence.Timeout
			due      utcTime
			metadata []byte
		)
		if err := rows.Scan(&t.ID, &t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount); err != nil {
			return nil, fmt.Errorf("sqlserver: peek %d timeouts: %w", len(ids), err)
		}
		t.Due = due.Time
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("sqlserver: peek %q: %w", t.ID, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlserver: peek %d timeouts: %w", len(ids), err)
	}
	return out, nil
}

// RemoveMany deletes the timeouts with those ids and returns the ids it deleted: one statement per
// 500 ids, in one transaction and one commit when there are more.
func (s *Store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlserver: remove %d timeouts: %w", len(ids), err)
	}
	all := len(ids)
	ids = storableIDs(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	var removed []string
	err := s.batch(ctx, len(ids) > maxIn, func(db queryer) error {
		removed = removed[:0]
		for start := 0; start < len(ids); start += maxIn {
			chunk := ids[start:min(len(ids), start+maxIn)]
			got, err := queryIDs(ctx, db, s.q.removeMany(len(chunk)), idArgs(chunk))
			if err != nil {
				return err
			}
			removed = append(removed, got...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlserver: remove %d timeouts: %w", all, err)
	}
	return removed, nil
}

// storableIDs returns the ids that could be stored (see storable), in a new slice: the others
// are looked up in no query.
func storableIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if storable(id) {
			out = append(out, id)
		}
	}
	return out
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// batch runs run on the pool, or in one transaction when inTx (several statements, one commit).
// A run chosen as a deadlock victim, which SQL Server rolled back, is run again, up to
// batchAttempts times.
func (s *Store) batch(ctx context.Context, inTx bool, run func(db queryer) error) error {
	for attempt := 1; ; attempt++ {
		var err error
		if inTx {
			err = s.inTransaction(ctx, run)
		} else {
			err = run(s.db)
		}
		if err == nil || attempt == batchAttempts || ctx.Err() != nil || !isServerError(err, errDeadlock) {
			return err
		}
	}
}

func (s *Store) inTransaction(ctx context.Context, run func(db queryer) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := run(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// queryIDs runs a statement that returns ids.
func queryIDs(ctx context.Context, db queryer, query string, args []any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	return ids, nil
}
