package sqltransport

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/internal/exclusive"
)

// exclusiveCheckInterval is how often a subscription that must be its queue's only consumer
// checks that the connection holding its lock is still there.
const exclusiveCheckInterval = 5 * time.Second

// exclusiveLock is a lock in the database that only one subscription to a topic may hold at a
// time, whatever process it runs in: a session-level advisory lock on PostgreSQL
// (pg_try_advisory_lock, per database), a named lock on MySQL and MariaDB (GET_LOCK, per server).
// Its key is a hash of the table's schema (on PostgreSQL the connection's current schema when
// Config.Schema is empty; on MySQL the database) and name, so that only a subscription to the
// same table is refused. It lives as long as the connection that took it, which the subscription
// keeps for itself: a process that dies releases it with its connections.
type exclusiveLock struct {
	dialect Dialect
	schema  string
	table   string
	topic   string
}

func newExclusiveLock(n names, topic string) exclusiveLock {
	return exclusiveLock{dialect: n.dialect, schema: n.schema, table: n.table(topic), topic: topic}
}

// Lock keys, from the schema ($1, PostgreSQL only) and the table.
const (
	postgresLockKey = `('x' || left(md5(CASE WHEN $1 = '' THEN current_schema() ELSE $1 END || '.' || $2 || '.timeoutmill.exclusive'), 16))::bit(64)::bigint`
	mysqlLockName   = `CONCAT('timeoutmill.', LEFT(SHA2(CONCAT(IFNULL(DATABASE(), ''), '.', ?), 256), 40))`
)

// take tries to take the lock on conn: false when another session holds it.
func (l exclusiveLock) take(ctx context.Context, conn *sql.Conn) (bool, error) {
	var (
		held bool
		err  error
	)
	if l.dialect == MySQL {
		var got sql.NullInt64
		err = conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+mysqlLockName+`, 0)`, l.table).Scan(&got)
		held = got.Valid && got.Int64 == 1
	} else {
		err = conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(`+postgresLockKey+`)`, l.schema, l.table).Scan(&held)
	}
	if err != nil {
		return false, fmt.Errorf("taking the lock that keeps %q to one consumer: %w", l.topic, err)
	}
	return held, nil
}

// release gives the lock back and returns conn to the pool, or closes conn when the lock may
// still be held on it.
func (l exclusiveLock) release(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if l.dialect == MySQL {
		_, err = conn.ExecContext(ctx, `DO RELEASE_LOCK(`+mysqlLockName+`)`, l.table)
	} else {
		_, err = conn.ExecContext(ctx, `SELECT pg_advisory_unlock(`+postgresLockKey+`)`, l.schema, l.table)
	}
	if err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // the pool closes it, and the lock with it
	}
	_ = conn.Close()
}

// inUse is the error of a subscription refused because another holds the lock.
func (l exclusiveLock) inUse() error {
	return fmt.Errorf("%w: %q (table %s) has another consumer, and a deferred queue is never shared",
		exclusive.ErrInUse, l.topic, l.table)
}

// holdExclusive takes topic's lock on a connection of its own, or fails with
// exclusive.ErrInUse while another subscription holds it. It then keeps the lock until ctx ends
// or the Subscriber closes, checking every exclusiveCheckInterval that its connection is alive;
// a lost connection (a database restart) loses the lock, which is taken again on a new one, and
// an error is logged for as long as another subscription holds it meanwhile.
func (s *Subscriber) holdExclusive(ctx context.Context, topic string) error {
	l := newExclusiveLock(s.tables.names, topic)
	conn, err := s.takeExclusive(ctx, l)
	if err != nil {
		return err
	}
	logger := s.logger.With(watermill.LogFields{"topic": topic})
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		ticker := time.NewTicker(exclusiveCheckInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
			case <-s.closing:
			case <-ticker.C:
				conn = s.keepExclusive(ctx, l, conn, logger)
				continue
			}
			if conn != nil {
				l.release(conn)
			}
			return
		}
	}()
	return nil
}

// takeExclusive takes l on a new connection, which it returns holding the lock.
func (s *Subscriber) takeExclusive(ctx context.Context, l exclusiveLock) (*sql.Conn, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("taking the lock that keeps %q to one consumer: %w", l.topic, err)
	}
	held, err := l.take(ctx, conn)
	if err != nil || !held {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
		if err == nil {
			err = l.inUse()
		}
		return nil, err
	}
	return conn, nil
}

// keepExclusive checks that conn (nil: the lock was lost) still holds l, and takes l again on a
// new connection when it does not. It returns the connection holding l, or nil.
func (s *Subscriber) keepExclusive(ctx context.Context, l exclusiveLock, conn *sql.Conn, logger watermill.LoggerAdapter) *sql.Conn {
	if conn != nil {
		if err := conn.PingContext(ctx); err == nil || ctx.Err() != nil {
			return conn
		}
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}
	conn, err := s.takeExclusive(ctx, l)
	if err != nil {
		if ctx.Err() == nil {
			logger.Error("The connection holding this subscription's lock was lost, and the lock cannot be taken again; "+
				"trying again", err, nil)
		}
		return nil
	}
	logger.Info("The lock that keeps the queue to one consumer was lost with its connection and taken again", nil)
	return conn
}
