package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// keyLockTimeout is how long, in seconds, a Schedule waits for the lock on its key.
const keyLockTimeout = 60

// keyTx runs the transaction of a keyed Schedule holding a named lock (GET_LOCK) on the key, so
// that Schedules of one key take turns. Locking only the holder's row is not enough on InnoDB:
// each replace deletes the row the others wait for, and the inserts that follow deadlock on the
// unique index's next-key locks. A named lock belongs to the session, not the transaction, so it
// is taken and released on a connection of its own around the transaction; a connection whose
// release failed is discarded rather than returned to the pool still holding it.
func (s *Store) keyTx(ctx context.Context, key string, run func(ctx context.Context, q sqlstore.Querier) error) (err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	name := s.keyLockName(key)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, name, keyLockTimeout).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return fmt.Errorf("timed out after %d s waiting for the lock on the key, held by another Schedule", keyLockTimeout)
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(?)`, name); rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // closes the session, and its lock
			err = errors.Join(err, rerr)
		}
	}()
	tx, err := conn.BeginTx(ctx, readCommitted)
	if err != nil {
		return err
	}
	if err := run(ctx, tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// keyLockName names the lock of key in the store's table: a hash, since a lock's name has at most
// 64 characters.
func (s *Store) keyLockName(key string) string {
	sum := sha256.Sum256([]byte(s.q.table + "\x00" + key))
	return "timeoutmill:" + hex.EncodeToString(sum[:20])
}
