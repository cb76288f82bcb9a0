package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// RemoveTx deletes the timeout with that id inside tx, a transaction on the store's database that
// the caller commits or rolls back; it is Remove for a caller that forwards the message in the
// same transaction, so that forwarding and removing happen together or not at all. It returns
// false when there was nothing to remove: the timeout is gone already, and the caller must not
// forward it. The store's table is named with its schema, so tx may use any search_path.
func (s *Store) RemoveTx(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	if err := sqlstore.Opened(s.c()); err != nil {
		return false, err
	}
	if tx == nil {
		return false, errors.New("postgres: remove: tx is nil")
	}
	del := &sqlstore.StatementsOf(s.core).Delete
	res, err := tx.ExecContext(ctx, del.SQL, del.Args(sqlstore.IDParams{ID: id})...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return false, fmt.Errorf("postgres: remove %q in a transaction: %w", id, err)
	}
	return n > 0, nil
}
