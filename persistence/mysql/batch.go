package mysql

import (
	"context"
	"errors"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// Bounds of one statement of a batch call. maxIn ids make 500 of the 65,535 parameters a prepared
// statement may take (an INSERT's 500 rows take 4,000); maxInsertBytes keeps one INSERT far below
// max_allowed_packet (16 MiB by default on MariaDB): larger batches take more statements, in one
// transaction all the same. A single timeout larger than that still goes alone, as Store sends it.
const (
	maxIn          = 500
	maxInsertBytes = 4 << 20
)

// batchRow is one timeout of a StoreMany.
type batchRow struct {
	sqlstore.Row
}

func (r batchRow) size() int {
	return len(r.Payload) + len(r.Metadata) + len(r.T.Destination) + len(r.T.Owner) + len(r.T.ID)
}

// storeRows inserts those of rows that are not stored, in the batch's transaction, at most maxIn
// rows and maxInsertBytes per statement.
func (s *Store) storeRows(ctx context.Context, tx sqlstore.Querier, sorted []sqlstore.Row) ([]string, error) {
	rows := make([]batchRow, len(sorted))
	ids := make([]string, len(sorted))
	for i, r := range sorted {
		rows[i] = batchRow{Row: r}
		ids[i] = r.T.ID
	}
	stored, err := s.storedIDs(ctx, tx, ids, false)
	if err != nil {
		return nil, err
	}
	var inserted []string
	fresh := make([]batchRow, 0, len(rows))
	for _, r := range rows {
		if _, ok := stored[r.T.ID]; !ok {
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
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, r := range fresh[:n] {
			inserted = append(inserted, r.T.ID)
		}
		fresh = fresh[n:]
	}
	return inserted, nil
}

// withoutStored returns rows without those of their first n that are stored now. It fails with
// ER_DUP_ENTRY when it finds none stored, so that a duplicate it cannot see (none should exist)
// ends the transaction rather than repeating it forever.
func (s *Store) withoutStored(ctx context.Context, tx sqlstore.Querier, rows []batchRow, n int) ([]batchRow, error) {
	ids := make([]string, n)
	for i, r := range rows[:n] {
		ids[i] = r.T.ID
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
		if _, ok := stored[r.T.ID]; !ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// insert inserts rows with one statement.
func (s *Store) insert(ctx context.Context, tx sqlstore.Querier, rows []batchRow) error {
	args := make([]any, 0, 8*len(rows))
	for _, r := range rows {
		args = append(args, s.sel.row.Args(sqlstore.StoreParams{ID: r.T.ID, Destination: r.T.Destination, Owner: r.T.Owner,
			Due: r.Due, Payload: r.Payload, Metadata: r.Metadata, FailureCount: r.T.FailureCount})...)
	}
	_, err := tx.ExecContext(ctx, s.q.storeMany(s.sel.row.SQL, len(rows)), args...)
	return err
}

// storedIDs returns which of ids (sorted) are stored, maxIn ids per statement. With lock, it locks
// their rows until the transaction ends.
func (s *Store) storedIDs(ctx context.Context, tx sqlstore.Querier, ids []string, lock bool) (map[string]struct{}, error) {
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

// removeIDs locks the rows of ids (sorted) that are stored, in the batch's transaction, and
// deletes them.
func (s *Store) removeIDs(ctx context.Context, tx sqlstore.Querier, ids []string) ([]string, error) {
	found, err := s.storedIDs(ctx, tx, ids, true)
	if err != nil {
		return nil, err
	}
	removed := make([]string, 0, len(found))
	for _, id := range ids {
		if _, ok := found[id]; ok {
			removed = append(removed, id)
		}
	}
	if len(removed) > 0 {
		if _, err := tx.ExecContext(ctx, s.q.deleteIn(len(removed)), idArgs(removed)...); err != nil {
			return nil, err
		}
	}
	return removed, nil
}

// idArgs returns ids as the binary strings the id column holds.
func idArgs(ids []string) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = []byte(id)
	}
	return args
}
