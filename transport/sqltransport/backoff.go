package sqltransport

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// backoff is the consumers' watermill-sql BackoffManager: wait PollInterval after finding the
// queue empty, look again at once after a batch or a lock conflict, and wait RetryInterval
// after any other failure. Unlike watermill-sql's default it recognises lock conflicts by their
// error codes rather than their words, and says nothing when the subscription is being stopped.
type backoff struct {
	poll, retry time.Duration
}

func (b backoff) HandleError(logger watermill.LoggerAdapter, noMsg bool, err error) time.Duration {
	switch {
	case err == nil && noMsg:
		return b.poll
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The subscription is ending; its loop notices before the next look.
		return b.poll
	case lockConflict(err):
		logger.Debug("Lock conflict while taking messages; trying again", watermill.LogFields{"err": err.Error()})
		return 0
	}
	logger.Error("Taking messages from the queue failed; trying again", err, watermill.LogFields{"retry_in": b.retry})
	return b.retry
}

// lockConflict reports a deadlock or a serialization failure, which trying again resolves.
func lockConflict(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "40001" || pg.Code == "40P01" || pg.Code == "55P03"
	}
	var my *gomysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1213 || my.Number == 1205
	}
	return false
}
