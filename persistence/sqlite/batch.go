package sqlite

import (
	"context"
	"errors"
)

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
