package sqltransport

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// tableCache creates topics' tables when they are missing, once per topic per Publisher or
// Subscriber. It replaces watermill-sql's own schema initialization, which in v4.0.0 runs its
// queries twice (in a transaction, then again outside it), bounds them with a context of its own
// rather than the caller's, and needs the right to create tables even when they exist.
type tableCache struct {
	db    *sql.DB
	names names
	skip  bool

	mu    sync.Mutex
	ready map[string]bool
}

func newTableCache(db *sql.DB, n names, skip bool) *tableCache {
	return &tableCache{db: db, names: n, skip: skip, ready: map[string]bool{}}
}

// ensure makes sure each topic's table exists, unless schema initialization is skipped.
func (c *tableCache) ensure(ctx context.Context, topics ...string) error {
	for _, topic := range topics {
		if err := validateTopic(topic); err != nil {
			return err
		}
	}
	if c.skip {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, topic := range topics {
		if c.ready[topic] {
			continue
		}
		if err := c.create(ctx, topic); err != nil {
			return fmt.Errorf("sqltransport: creating the table of %q: %w", topic, err)
		}
		c.ready[topic] = true
	}
	return nil
}

// create creates topic's table if it does not exist. It looks first, so that a user without the
// right to create tables can use tables an operator made.
func (c *tableCache) create(ctx context.Context, topic string) error {
	exists, err := c.exists(ctx, topic)
	if err != nil || exists {
		return err
	}
	if c.names.dialect == MySQL {
		// MySQL's CREATE TABLE IF NOT EXISTS is safe to race: the metadata lock orders them.
		_, err := c.db.ExecContext(ctx, c.names.createTable(topic))
		return err
	}
	// PostgreSQL's is not (a unique violation in pg_class when two race), not even for two
	// different tables: each makes a sequence for its offsets, named from a cut of the table's
	// name, and two long names can cut to one. So every creation takes one lock.
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('timeoutmill:sqltransport:create table'))`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, c.names.createTable(topic)); err != nil {
		return err
	}
	return tx.Commit()
}

func (c *tableCache) exists(ctx context.Context, topic string) (bool, error) {
	var exists bool
	var err error
	if c.names.dialect == MySQL {
		err = c.db.QueryRowContext(ctx,
			`SELECT COUNT(*) > 0 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`,
			c.names.table(topic)).Scan(&exists)
	} else {
		err = c.db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, c.names.quoted(topic)).Scan(&exists)
	}
	return exists, err
}
