package sqltransport

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	// The database/sql drivers of the dialects: "pgx" and "mysql".
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/timeoutmill/timeoutmill/internal/sqlpool"
)

// New returns a Publisher and a Subscriber on the database config names, each on a pool of its
// own (or both on config.DB), so that consumers holding connections while handlers run can never
// starve publishing. The Publisher wakes the Subscriber's idle consumers when it commits rows to
// their topic. It fails when the database cannot be reached now.
func New(ctx context.Context, config Config, logger watermill.LoggerAdapter) (*Publisher, *Subscriber, error) {
	pub, err := NewPublisher(ctx, config, logger)
	if err != nil {
		return nil, nil, err
	}
	sub, err := pub.NewSubscriber(ctx, config, logger)
	if err != nil {
		return nil, nil, errors.Join(err, pub.Close())
	}
	return pub, sub, nil
}

// names is the table naming of config, after setDefaults.
func (c Config) names() names {
	return names{dialect: c.Dialect, schema: c.Schema, prefix: c.TablePrefix}
}

// openDB returns config.DB, or a pool on config.DSN that the caller owns, after checking that
// the database answers. maxOpen 0 leaves the pool unbounded; a bounded one is opened whole.
func openDB(ctx context.Context, config Config, role string, maxOpen int) (db *sql.DB, owns bool, err error) {
	where := "the database"
	if config.DB == nil {
		where = redact(config.DSN)
		db, err = sqlpool.Open(config.driverName(), config.DSN) // with TCP keepalive, as the SQL stores
		if err != nil {
			return nil, false, fmt.Errorf("sqltransport: opening the %s's pool on %s: %w", role, where, redactError(err, config.DSN))
		}
		db.SetMaxOpenConns(maxOpen)
		if maxOpen > 0 {
			db.SetMaxIdleConns(maxOpen)
		}
		owns = true
	} else {
		db = config.DB
	}
	check := db.PingContext
	if owns && maxOpen > 0 {
		// A bounded pool of ours is opened whole now, not while the first burst of messages waits
		// for the server to start each connection.
		check = func(ctx context.Context) error { return sqlpool.Warm(ctx, db, maxOpen) }
	}
	if err := check(ctx); err != nil {
		if owns {
			_ = db.Close()
		}
		return nil, false, fmt.Errorf("sqltransport: connecting the %s to %s: %w", role, where, redactError(err, config.DSN))
	}
	return db, owns, nil
}

func loggerOrNop(logger watermill.LoggerAdapter) watermill.LoggerAdapter {
	if logger == nil {
		return watermill.NopLogger{}
	}
	return logger
}
