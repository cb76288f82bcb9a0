package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	// The pgx database/sql driver, registered as "pgx".
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// Store keeps timeouts in one PostgreSQL table. It is safe for concurrent use by many goroutines
// and many processes.
type Store struct {
	core *sqlstore.Store
	q    queries
}

var (
	_ persistence.Store     = (*Store)(nil)
	_ persistence.Installer = (*Store)(nil)
	_ persistence.Inspector = (*Store)(nil)
	_ persistence.Handover  = (*Store)(nil)
)

// Open connects to the server at config.DSN and returns a store on a pool of its own, which
// Close closes. It checks that the server answers, but does not create the table: call
// SetupInfrastructure (timeouts.Manager does unless told not to).
func Open(ctx context.Context, config Config) (*Store, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if config.DSN == "" {
		return nil, errors.New("postgres: invalid config: DSN must be set for Open")
	}
	db, err := sql.Open("pgx", config.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	db.SetMaxOpenConns(config.MaxOpenConns)
	db.SetMaxIdleConns(config.MaxOpenConns)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	return newStore(db, true, config), nil
}

// New returns a store on a *sql.DB the caller opened with the "pgx" driver (for a pgxpool.Pool,
// stdlib.OpenDBFromPool makes one). Close leaves db open. Like Open, it does not create the table.
func New(db *sql.DB, config Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("postgres: db is nil")
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	return newStore(db, false, config), nil
}

func newStore(db *sql.DB, ownsDB bool, config Config) *Store {
	q := newQueries(config.Schema, config.Table)
	return &Store{core: sqlstore.New(q.dialect(db, ownsDB)), q: q}
}

// c is the store's core: for a store that Open or New did not make, one whose calls all fail.
func (s *Store) c() *sqlstore.Store {
	if s == nil || s.core == nil {
		return sqlstore.NotOpened("postgres")
	}
	return s.core
}

// SetupInfrastructure creates the schema, the table and its indexes when they are missing. When
// all exist it changes nothing and needs no right to create them.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	if err := s.c().Opened(); err != nil {
		return err
	}
	var installed bool
	err := s.core.DB().QueryRowContext(ctx,
		`SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regclass($3) IS NOT NULL`,
		s.q.table, s.q.availableIndex, s.q.ownerIndex).Scan(&installed)
	if err != nil {
		return fmt.Errorf("postgres: set up %s: %w", s.q.table, err)
	}
	if installed {
		return nil
	}
	if err := s.install(ctx); err != nil {
		return fmt.Errorf("postgres: set up %s: %w", s.q.table, err)
	}
	return nil
}

func (s *Store) install(ctx context.Context) (err error) {
	tx, err := s.core.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// Instances starting together would race in CREATE ... IF NOT EXISTS (a unique violation in
	// the catalog): the first to get the lock creates, the others then find everything there.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "timeoutmill:"+s.q.table); err != nil {
		return err
	}
	var schemaExists bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.q.schemaName).Scan(&schemaExists); err != nil {
		return err
	}
	stmts := []string{s.q.createTable, s.q.createAvailableIndex, s.q.createOwnerIndex}
	if !schemaExists {
		// Only when missing: CREATE SCHEMA IF NOT EXISTS needs the right to create schemas even
		// when the schema is there.
		stmts = slices.Insert(stmts, 0, s.q.createSchema)
	}
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Store keeps t unless a timeout with its id is stored already.
func (s *Store) Store(ctx context.Context, t persistence.Timeout) (bool, error) {
	return s.c().Store(ctx, t)
}

// Next returns when the earliest timeout becomes claimable: its due time, or its lease's end.
func (s *Store) Next(ctx context.Context) (time.Time, bool, error) { return s.c().Next(ctx) }

// ClaimDue claims up to limit timeouts claimable at now in one statement, and returns their ids
// earliest due first.
//
// The claim commits without waiting for its WAL to reach the disk (synchronous_commit = off for
// its own transaction; the session's setting is untouched): that flush was a third of a claim's
// time here. A claim is a lease, not data: a database crash can forget the claims of the last
// moments before it, which makes their timeouts claimable again at once, as if their lease had run
// out. That can announce a timeout twice (a duplicate, which at-least-once delivery allows), never
// lose one nor deliver one early; the next durable commit on the server (any Store or Remove)
// makes every earlier claim durable too.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	return s.c().ClaimDue(ctx, now, limit, lease)
}

// Peek returns the timeout with that id, claimed or not.
func (s *Store) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	return s.c().Peek(ctx, id)
}

// Remove deletes the timeout with that id once it was forwarded.
func (s *Store) Remove(ctx context.Context, id string) (bool, error) { return s.c().Remove(ctx, id) }

// Cancel deletes the timeout with that id so it is never delivered.
func (s *Store) Cancel(ctx context.Context, id string) (bool, error) { return s.c().Cancel(ctx, id) }

// IncrementFailureCount records a failed forwarding attempt.
func (s *Store) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	return s.c().IncrementFailureCount(ctx, id)
}

// CancelByOwner deletes every timeout of owner. An empty owner cancels nothing: it means "no
// owner", not every timeout without one. The owner index is a partial hash index.
func (s *Store) CancelByOwner(ctx context.Context, owner string) (int, error) {
	return s.c().CancelByOwner(ctx, owner)
}

// Close closes the pool Open opened; a *sql.DB given to New stays open.
func (s *Store) Close() error { return s.c().Close() }

// Stats counts the stored timeouts, claimed or not, and their earliest and latest due times. It
// reads the whole table: it is for operators, not for a poll loop.
func (s *Store) Stats(ctx context.Context) (persistence.Stats, error) { return s.c().Stats(ctx) }

// List returns timeouts earliest due first, without their payloads.
func (s *Store) List(ctx context.Context, opts persistence.ListOptions) ([]persistence.Timeout, error) {
	return s.c().List(ctx, opts)
}

// StoreMany keeps, in one statement and one commit, the timeouts whose ids are not stored yet and
// returns those ids. It stores none when any of them is invalid. Rows are inserted in id order,
// so that batches holding the same ids in other orders wait for each other instead of
// deadlocking.
func (s *Store) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	return s.c().StoreMany(ctx, ts)
}

// PeekMany returns the stored timeouts among ids in one statement; ids not stored are left out.
// It fails with persistence.ErrCorruptMetadata when any of them cannot be read.
func (s *Store) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	return s.c().PeekMany(ctx, ids)
}

// RemoveMany deletes the timeouts with those ids in one statement, one commit, and returns the
// ids it deleted.
func (s *Store) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	return s.c().RemoveMany(ctx, ids)
}

// Survey describes the timeouts due at or after from.
func (s *Store) Survey(ctx context.Context, from time.Time) (persistence.Survey, error) {
	return s.c().Survey(ctx, from)
}

// Hide claims until mark up to limit timeouts due at or after from that no poller holds at now,
// in one statement.
func (s *Store) Hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]persistence.Timeout, error) {
	return s.c().Hide(ctx, now, from, limit, mark)
}

// Release makes the timeouts with these ids claimable again from their due time, in one
// statement.
func (s *Store) Release(ctx context.Context, ids []string) (int, error) {
	return s.c().Release(ctx, ids)
}
