package mysql

import (
	"context"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// hideRetried hides, up to claimAttempts times while InnoDB chooses it as a deadlock victim.
func (s *Store) hideRetried(ctx context.Context, p sqlstore.HideParams) ([]persistence.Timeout, error) {
	for attempt := 1; ; attempt++ {
		hidden, err := s.hide(ctx, p)
		if err == nil || !isServerError(err, errLockDeadlock) || attempt == claimAttempts {
			return hidden, err
		}
	}
}

// hide locks the rows, skipping rows others hold, and moves their claim to mark, in one READ
// COMMITTED transaction, as a claim does.
func (s *Store) hide(ctx context.Context, p sqlstore.HideParams) (hidden []persistence.Timeout, err error) {
	tx, err := s.db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	rows, err := tx.QueryContext(ctx, s.sel.hide.SQL, s.sel.hide.Args(p)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	args := []any{sqlstore.FormatDatetime(p.Mark), nil} // no claiming instance
	for rows.Next() {
		t, err := sqlstore.ScanTimeout(s.core, rows)
		if err != nil {
			return nil, err
		}
		hidden = append(hidden, t)
		args = append(args, []byte(t.ID))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if len(hidden) > 0 {
		if _, err := tx.ExecContext(ctx, s.q.moveIn(len(hidden)), args...); err != nil {
			return nil, err
		}
	}
	return hidden, tx.Commit()
}
