package sqlite

import (
	"context"
	"errors"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

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

// inOneTransaction makes a change of many statements commit once: the writer runs a change that
// is alone in its group on the pool, where each statement would commit by itself.
func inOneTransaction(run func(ctx context.Context, db execer) error) func(ctx context.Context, db execer) error {
	return func(ctx context.Context, db execer) error {
		pool, ok := db.(querier)
		if !ok || pool.tx != nil {
			return run(ctx, db) // in the group's transaction
		}
		tx, err := pool.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := run(ctx, querier{p: pool.p, tx: tx}); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		return tx.Commit()
	}
}
