package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// PeekMany returns the stored timeouts among ids, one statement per maxIn ids on the reader pool;
// ids not stored are left out.
func (s *Store) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	return s.c().PeekMany(ctx, ids)
}

// StoreMany keeps the timeouts whose ids are not stored yet, in one change of the writer, and
// returns those ids. It stores none when any of them is invalid.
func (s *Store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	return s.c().StoreMany(ctx, ts)
}

// storeRows inserts rows one statement each, in the change's transaction.
func (s *Store) storeRows(ctx context.Context, db sqlstore.Querier, rows []sqlstore.Row) ([]string, error) {
	var inserted []string
	for _, r := range rows {
		due := r.Due.UnixMicro()
		res, err := db.ExecContext(ctx, s.q.core.Store,
			r.T.ID, r.T.Destination, due, due, r.T.Owner, r.Payload, r.Metadata, r.T.FailureCount)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if n == 1 {
			inserted = append(inserted, r.T.ID)
		}
	}
	return inserted, nil
}

// RemoveMany deletes the timeouts with those ids in one change of the writer, committed with
// whatever else is being written, and returns the ids it deleted.
func (s *Store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	return s.c().RemoveMany(ctx, ids)
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
