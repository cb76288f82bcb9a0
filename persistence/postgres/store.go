package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	// pgx's database/sql driver (which also registers it as "pgx", for New's callers).
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/timeoutmill/timeoutmill/internal/sqlpool"
	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// Store keeps timeouts in one PostgreSQL table. It is safe for concurrent use by many goroutines
// and many processes.
type Store struct {
	*core // the shared SQL core: Store, ClaimDue, the batch, inspection and handover calls
	q     queries
	openMark
}

type core = sqlstore.Store // embedded by this name: no exported field, no hidden Store method

// Open connects to the server at config.DSN and returns a store on a pool of its own, which
// Close closes. It checks that the server answers and opens the pool's MaxOpenConns connections
// (see Config.MaxOpenConns), but does not create the table: call
// SetupInfrastructure (timeouts.Manager does unless told not to).
func Open(ctx context.Context, config Config) (*Store, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if config.DSN == "" {
		return nil, errors.New("postgres: invalid config: DSN must be set for Open")
	}
	// Connections with TCP keepalive, and a connect timeout per host (see sqlpool.PostgresConfig).
	connConfig, err := sqlpool.PostgresConfig(config.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: invalid config: DSN: %w", err)
	}
	db := stdlib.OpenDB(*connConfig)
	db.SetMaxOpenConns(config.MaxOpenConns)
	db.SetMaxIdleConns(config.MaxOpenConns)
	if err := sqlpool.Warm(ctx, db, config.MaxOpenConns); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s, err := newStore(db, true, config)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
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
	return newStore(db, false, config)
}

func newStore(db *sql.DB, ownsDB bool, config Config) (*Store, error) {
	q := newQueries(config.Schema, config.Table)
	d, err := q.dialect(db, ownsDB)
	if err != nil {
		return nil, err
	}
	core, err := sqlstore.New(d)
	if err != nil {
		return nil, err
	}
	return &Store{core: core, openMark: opened(), q: q}, nil
}

// DB returns the pool the store runs on, nil for a store Open or New did not make: the SQL
// transport's exactly-once forwarder checks that it shares the transport's database.
func (s *Store) DB() *sql.DB { return sqlstore.DB(s.c()) }

// Now returns the database server's current time, PostgreSQL's clock_timestamp(), in one round
// trip: the clock that decides when a timeout is due when managers on several machines share the
// store (persistence.Clocked).
func (s *Store) Now(ctx context.Context) (time.Time, error) { return sqlstore.DatabaseTime(ctx, s.c()) }

var _ persistence.Clocked = (*Store)(nil)

// c is the store's core: for a store that Open or New did not make, one whose calls all fail.
func (s *Store) c() *sqlstore.Store {
	if s == nil || s.core == nil {
		return sqlstore.NotOpened("postgres")
	}
	return s.core
}

// SetupInfrastructure creates the schema, the table and its indexes when they are missing, and
// adds the key column and its index, the parking reason, the claiming instance and its index, and the counts
// Stats reads (a table, its triggers and two partial indexes; see the package doc) to a table an
// older version created. When all exist it changes nothing and needs no right to create them.
// Adding the counts to a table an older version made reads the whole table once, with its
// writers waiting until it is done.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	var installed bool
	err := sqlstore.DB(s.core).QueryRowContext(ctx,
		`SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regclass($3) IS NOT NULL
	AND to_regclass($4) IS NOT NULL AND to_regclass($5) IS NOT NULL AND to_regclass($6) IS NOT NULL
	AND (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1)
		AND attname IN ('parked_reason', 'claimed_by') AND NOT attisdropped) = 2
	AND `+s.q.counts.installed(),
		s.q.table, s.q.availableIndex, s.q.ownerIndex, s.q.keyIndex, s.q.dueIndex, s.q.claimedByIndex).Scan(&installed)
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
	tx, err := sqlstore.DB(s.core).BeginTx(ctx, nil)
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
	// A table an older version created gets the key column and the indexes added.
	stmts := []string{s.q.createTable, s.q.createAvailableIndex, s.q.createOwnerIndex, s.q.addKey, s.q.createKeyIndex,
		s.q.createDueIndex, s.q.addParked, s.q.createClaimedByIndex}
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
	if err := s.q.counts.installCounts(ctx, tx, s.q.table); err != nil {
		return err
	}
	return tx.Commit()
}

var (
	_ persistence.Parker  = (*Store)(nil)
	_ persistence.Claimer = (*Store)(nil)
)
