package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/timeoutmill/timeoutmill/internal/sqlpool"
	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// Store keeps timeouts in one MariaDB/MySQL table. It is safe for concurrent use by many
// goroutines and many processes.
type Store struct {
	*core // the shared SQL core: Store, ClaimDue, the batch, inspection and handover calls
	db    *sql.DB
	stmts *statements
	q     queries
	sel   selects
	// read reads the times of the claim's own statement.
	read sqlstore.Binding
	openMark
}

type core = sqlstore.Store // embedded by this name: no exported field, no hidden Store method

// Server error numbers the store acts on.
const (
	errDupEntry     = 1062 // ER_DUP_ENTRY
	errNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
	errBadField     = 1054 // ER_BAD_FIELD_ERROR
	errLockDeadlock = 1213 // ER_LOCK_DEADLOCK
)

// claimAttempts bounds how often a claim is retried after InnoDB chose it as a deadlock victim.
const claimAttempts = 3

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
		return nil, errors.New("mysql: invalid config: DSN must be set for Open")
	}
	dsn, err := gomysql.ParseDSN(config.DSN)
	if err != nil {
		return nil, fmt.Errorf("mysql: invalid config: DSN: %w", err)
	}
	if dsn.DBName == "" {
		return nil, errors.New("mysql: invalid config: DSN must name a database (user:password@tcp(host:port)/database)")
	}
	// A dialer of the store's own with TCP keepalive (see sqlpool.MySQLDialer).
	if err := sqlpool.MySQLDialer(dsn); err != nil {
		return nil, fmt.Errorf("mysql: invalid config: DSN: %w", err)
	}
	connector, err := gomysql.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: open: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(config.MaxOpenConns)
	db.SetMaxIdleConns(config.MaxOpenConns)
	// Below the server's wait_timeout (8 h by default), so that the pool never hands out a
	// connection the server has closed.
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := sqlpool.Warm(ctx, db, config.MaxOpenConns); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mysql: connect: %w", err)
	}
	s, err := newStore(db, true, config.Table)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store on a *sql.DB the caller opened with the "mysql" driver, connected to the
// database the table is in. Close leaves db open. Like Open, it does not create the table.
func New(db *sql.DB, config Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysql: db is nil")
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	return newStore(db, false, config.Table)
}

// readCommitted is the isolation of the store's transactions: they take no gap locks, so they
// never block a Store of a timeout that falls between the rows they lock.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

func newStore(db *sql.DB, ownsDB bool, table string) (*Store, error) {
	q := newQueries(table)
	sel, err := q.compile()
	if err != nil {
		return nil, err
	}
	s := &Store{openMark: opened(), db: db, q: q, sel: sel, read: binding()}
	s.stmts = newStatements(db)
	s.core, err = sqlstore.New(sqlstore.Dialect{
		Name: "mysql",
		DB:   db,
		Close: func() error {
			err := s.stmts.close()
			if ownsDB {
				err = errors.Join(err, db.Close())
			}
			return err
		},
		Run:  sqlstore.Run{Reader: s.stmts, Writer: s.stmts, TxOptions: readCommitted, BatchTx: true},
		SQL:  q.core,
		Bind: binding(),
		Errors: sqlstore.Errors{
			IsDuplicate: func(err error) bool { return isServerError(err, errDupEntry) },
			// A deadlock, or a duplicate id withoutStored could not place.
			Retry: func(err error) bool {
				return isServerError(err, errLockDeadlock) || isServerError(err, errDupEntry)
			},
		},
		Locks: sqlstore.Locks{
			Hold: s.hold,
			// Locking the key's row is not enough on InnoDB (see keyTx).
			KeyTx: s.keyTx,
		},
		Check: sqlstore.Check{Validate: validateTimeout},
		Own: sqlstore.Own{
			// Multi-row INSERTs of the ids a look found not stored: there is no ON CONFLICT DO
			// NOTHING, INSERT IGNORE would hide other errors too, and one duplicate fails the
			// whole statement.
			StoreRows: s.storeRows,
			// The rows are locked and read, then deleted: MySQL's DELETE has no RETURNING.
			RemoveIDs: s.removeIDs,
			// A locking SELECT (FORCE INDEX, SKIP LOCKED), then an UPDATE by id, with a retry on
			// a deadlock: an UPDATE can neither skip locked rows nor return the rows it changed.
			Claim: s.claimDue,
			Hide:  s.hideRetried,
		},
	})
	if err != nil {
		return nil, err
	}
	st := sqlstore.StatementsOf(s.core)
	s.stmts.keepOnly(st.Store.SQL, st.Next.SQL, st.Peek.SQL, st.Delete.SQL, st.IncrementFailureCount.SQL,
		st.CancelByOwner.SQL, s.sel.claim.SQL)
	return s, nil
}

// Now returns the database server's current time, its UTC_TIMESTAMP(6), in one round trip: the
// clock that decides when a timeout is due when managers on several machines share the store
// (persistence.Clocked).
func (s *Store) Now(ctx context.Context) (time.Time, error) { return sqlstore.DatabaseTime(ctx, s.c()) }

var _ persistence.Clocked = (*Store)(nil)

// c is the store's core: for a store that Open or New did not make, one whose calls all fail.
func (s *Store) c() *sqlstore.Store {
	if s == nil || s.core == nil {
		return sqlstore.NotOpened("mysql")
	}
	return s.core
}

// SetupInfrastructure creates the table and its indexes when the table is missing, and adds the
// key column and its index, the parking reason, and the claiming instance and its index to a
// table an older version created. When all exist it changes nothing and needs no right to create
// or alter the table. Adding the claiming instance's index reads the table once: on a large
// table, run it with `timeoutmill setup` before the instances start.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, s.q.tableExists)
	switch {
	case err == nil:
		err = s.addClaimedByIndex(ctx)
	case isServerError(err, errNoSuchTable):
		// IF NOT EXISTS: instances starting together may both get here; the server's metadata
		// lock lets one create and the other find it made.
		_, err = s.db.ExecContext(ctx, s.q.createTable)
	case isServerError(err, errBadField):
		// One ALTER at a time, each IF NOT EXISTS: instances migrating together wait for each
		// other's metadata lock and find the columns made.
		if _, err = s.db.ExecContext(ctx, s.q.addKey); err == nil {
			if _, err = s.db.ExecContext(ctx, s.q.addParked); err == nil {
				err = s.addClaimedByIndex(ctx)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("mysql: set up %s: %w", s.q.table, err)
	}
	return nil
}

// addClaimedByIndex adds ReleaseClaimsOf's index to a table an older version made, when it is
// missing. Building it reads the table once, with writers waiting only at its start and end.
func (s *Store) addClaimedByIndex(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, s.q.claimedByIndex)
	if err != nil {
		return err
	}
	indexed := rows.Next()
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || indexed {
		return err
	}
	_, err = s.db.ExecContext(ctx, s.q.addClaimedByIndex)
	return err
}

// Limits of the columns, checked before a server in a lax sql_mode cuts a value silently.
const (
	maxBlob       = 1<<16 - 1 // destination, owner
	maxMediumBlob = 1<<24 - 1 // metadata
)

// validateTimeout checks what the columns require beyond what every store requires.
func validateTimeout(t persistence.Timeout) error {
	due := sqlstore.RoundUpMicro(t.Due)
	switch {
	case due.Year() < 1000 || due.Year() > 9999:
		return fmt.Errorf("%w: due time %s is outside DATETIME's years 1000 to 9999", persistence.ErrInvalidTimeout, t.Due)
	case len(t.Destination) > maxBlob:
		return fmt.Errorf("%w: destination is longer than %d bytes", persistence.ErrInvalidTimeout, maxBlob)
	case len(t.Owner) > maxBlob:
		return fmt.Errorf("%w: owner is longer than %d bytes", persistence.ErrInvalidTimeout, maxBlob)
	}
	if n := len(persistence.EncodeMetadata(t.Metadata)); n > maxMediumBlob {
		return fmt.Errorf("%w: metadata takes %d bytes, more than %d", persistence.ErrInvalidTimeout, n, maxMediumBlob)
	}
	return nil
}

// claimDue claims, up to claimAttempts times while InnoDB chooses the claim as a deadlock
// victim.
func (s *Store) claimDue(ctx context.Context, p sqlstore.ClaimParams) ([]sqlstore.Claimed, error) {
	for attempt := 1; ; attempt++ {
		claims, err := s.claim(ctx, p)
		if err == nil || !isServerError(err, errLockDeadlock) || attempt == claimAttempts {
			return claims, err
		}
	}
}

// claim locks the earliest claimable rows, skipping rows another claim holds, and moves them to
// the end of the lease, in one READ COMMITTED transaction: it takes no gap locks, so it never
// blocks a Store of a timeout that falls between the rows it claims.
func (s *Store) claim(ctx context.Context, p sqlstore.ClaimParams) (claims []sqlstore.Claimed, err error) {
	tx, err := s.db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := s.stmts.get(ctx, s.sel.claim.SQL)
	if err != nil {
		return nil, err
	}
	rows, err := tx.StmtContext(ctx, stmt).QueryContext(ctx, s.sel.claim.Args(lockParams{Now: p.Now, Limit: p.Limit})...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	args := make([]any, 2, p.Limit+2)
	args[0], args[1] = sqlstore.FormatDatetime(p.Until), []byte(p.By)
	if p.By == "" {
		args[1] = nil // no claiming instance
	}
	for rows.Next() {
		var (
			c   sqlstore.Claimed
			due any
		)
		if err := rows.Scan(&c.ID, &due); err != nil {
			return nil, err
		}
		if c.Due, err = s.read.ReadTime(due); err != nil {
			return nil, err
		}
		claims = append(claims, c)
		args = append(args, []byte(c.ID))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if len(claims) > 0 {
		if _, err := tx.ExecContext(ctx, s.q.moveIn(len(claims)), args...); err != nil {
			return nil, err
		}
	}
	return claims, tx.Commit()
}

func isServerError(err error, number uint16) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

// hold takes instance with GET_LOCK on a connection of its own (see sqlstore.HoldOnConn). Lock
// names are server-wide and at most 64 characters: the name is the SHA-256, in hex, of the
// database, the table and the instance.
func (s *Store) hold(ctx context.Context, instance string) (func() error, bool, error) {
	const name = `SHA2(CONCAT_WS(0x00, 'timeoutmill instance', DATABASE(), ?, ?), 256)`
	return sqlstore.HoldOnConn(ctx, s.db, sqlstore.SessionLock{
		Try: func(ctx context.Context, conn *sql.Conn) (bool, error) {
			var got sql.NullInt64 // 1 taken, 0 held elsewhere, NULL on an error
			if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+name+`, 0)`, s.q.table, instance).Scan(&got); err != nil {
				return false, err
			}
			if !got.Valid {
				return false, errors.New("GET_LOCK failed")
			}
			return got.Int64 == 1, nil
		},
		Unlock: func(ctx context.Context, conn *sql.Conn) error {
			_, err := conn.ExecContext(ctx, `SELECT RELEASE_LOCK(`+name+`)`, s.q.table, instance)
			return err
		},
	})
}

var (
	_ persistence.Parker  = (*Store)(nil)
	_ persistence.Claimer = (*Store)(nil)
)
