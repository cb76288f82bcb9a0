package sqlserver

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// Store keeps timeouts in one SQL Server table. It is safe for concurrent use by many goroutines
// and many processes.
type Store struct {
	*core // the shared SQL core: Store, ClaimDue, the batch, inspection and handover calls
	db    *sql.DB
	q     queries
	openMark
}

type core = sqlstore.Store // embedded by this name: no exported field, no hidden Store method

// Server error numbers the store acts on.
const (
	errDuplicateKey      = 2627 // a PRIMARY KEY or UNIQUE constraint
	errDuplicateKeyIndex = 2601 // a unique index
)

// Open connects to the server at config.DSN and returns a store on a pool of its own, which
// Close closes. It checks that the server answers, but does not create the table: call
// SetupInfrastructure (timeouts.Manager does unless told not to). Its errors say whether the DSN
// or the connection failed, and never show a password.
func Open(ctx context.Context, config Config) (*Store, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	dsn, err := parseDSN(config.DSN)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(mssql.NewConnectorConfig(dsn))
	db.SetMaxOpenConns(config.MaxOpenConns)
	db.SetMaxIdleConns(config.MaxOpenConns)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, redactError(fmt.Errorf("sqlserver: connect to %s: %w", serverName(dsn), err), dsnSecrets(config.DSN))
	}
	s, err := newStore(db, true, config)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store on a *sql.DB the caller opened with the "sqlserver" driver of
// github.com/microsoft/go-mssqldb. Close leaves db open. Like Open, it does not create the table.
func New(db *sql.DB, config Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlserver: db is nil")
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	return newStore(db, false, config)
}

func newStore(db *sql.DB, ownsDB bool, config Config) (*Store, error) {
	s := &Store{openMark: opened(), db: db, q: newQueries(config.Schema, config.Table)}
	d := s.dialect()
	if ownsDB {
		d.Close = db.Close
	}
	var err error
	if s.core, err = sqlstore.New(d); err != nil {
		return nil, err
	}
	return s, nil
}

// dialect is how the core runs the store on s.db.
func (s *Store) dialect() sqlstore.Dialect {
	return sqlstore.Dialect{
		Name: "sqlserver",
		DB:   s.db,
		SQL: sqlstore.Queries{
			Store:                 s.q.store,
			Next:                  s.q.next,
			Now:                   s.q.now,
			Claim:                 s.q.claim,
			Peek:                  s.q.peek,
			Delete:                s.q.delete,
			IncrementFailureCount: s.q.incrementFailureCount,
			CancelByOwner:         s.q.cancelByOwner,
			Stats:                 s.q.stats,
			StatsByDestination:    s.q.statsByDestination,
			List:                  s.q.list,
			Exists:                s.q.exists,
			KeyHolder:             s.q.keyHolder,
			DropKey:               s.q.dropKey,
			Schedule:              s.q.schedule,
			Reschedule:            s.q.reschedule,
			PeekIn:                s.q.peekMany,
			RemoveIn:              s.q.removeMany,
			ReleaseIn:             s.q.releaseMany,
			UnparkIn:              s.q.unparkMany,
			DeleteParkedIn:        s.q.deleteParkedMany,
			Park:                  s.q.park,
			ReleaseClaimsOf:       s.q.releaseClaimsOf,
		},
		Bind: sqlstore.Binding{
			Style: sqlstore.Named,
			// Sent as a datetimeoffset at +00:00 (see toDateTime2); a lease past datetime2's end
			// is sent as its end.
			Times:    sqlstore.TimeValue,
			LastTime: maxDateTime2(),
			IDs:      sqlstore.IDsNamed,
			MaxIn:    maxIn,
			// The statements end in SELECT @@ROWCOUNT: the driver's rows-affected count would be
			// zero under SET NOCOUNT ON.
			RowCount: true,
		},
		Check: sqlstore.Check{Validate: validateTimeout, Storable: storable},
		Errors: sqlstore.Errors{
			IsDuplicate: func(err error) bool { return isServerError(err, errDuplicateKey, errDuplicateKeyIndex) },
			// A deadlock victim, which SQL Server rolled back.
			Retry: func(err error) bool { return isServerError(err, errDeadlock) },
		},
		Locks: sqlstore.Locks{Hold: s.hold},
		Own: sqlstore.Own{
			// One INSERT … SELECT FROM (VALUES …) WHERE NOT EXISTS for many rows: T-SQL has no
			// ON CONFLICT DO NOTHING.
			StoreRows:    s.storeRows,
			MaxStoreRows: maxStoreRows,
		},
	}
}

var (
	_ persistence.Parker  = (*Store)(nil)
	_ persistence.Claimer = (*Store)(nil)
)

// hold takes instance with sp_getapplock, owned by the session, on a connection of its own (see
// sqlstore.HoldOnConn). Application locks are per database and their names at most 255
// characters: the name is a SHA-256, in hex, of the table and the instance.
func (s *Store) hold(ctx context.Context, instance string) (func() error, bool, error) {
	sum := sha256.Sum256([]byte(s.q.table + "\x00" + instance))
	resource := "timeoutmill instance " + hex.EncodeToString(sum[:])
	return sqlstore.HoldOnConn(ctx, s.db, sqlstore.SessionLock{
		Try: func(ctx context.Context, conn *sql.Conn) (bool, error) {
			var result int
			if err := conn.QueryRowContext(ctx, holdInstance, sql.Named("resource", resource)).Scan(&result); err != nil {
				return false, err
			}
			if result < -1 {
				return false, fmt.Errorf("sp_getapplock returned %d", result)
			}
			return result >= 0, nil // 0 or 1 granted, -1 held elsewhere
		},
		Unlock: func(ctx context.Context, conn *sql.Conn) error {
			_, err := conn.ExecContext(ctx, releaseInstance, sql.Named("resource", resource))
			return err
		},
	})
}

// holdInstance takes the session's application lock on @resource without waiting, and selects
// sp_getapplock's result; releaseInstance gives it back.
const (
	holdInstance = `DECLARE @result int;
EXEC @result = sp_getapplock @Resource = @resource, @LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = 0;
SELECT @result;`
	releaseInstance = `EXEC sp_releaseapplock @Resource = @resource, @LockOwner = 'Session';`
)

// Now returns the database server's current time, its SYSUTCDATETIME(), in one round trip: the
// clock that decides when a timeout is due when managers on several machines share the store
// (persistence.Clocked).
func (s *Store) Now(ctx context.Context) (time.Time, error) { return sqlstore.DatabaseTime(ctx, s.c()) }

var _ persistence.Clocked = (*Store)(nil)

// c is the store's core: for a store that Open or New did not make, one whose calls all fail.
func (s *Store) c() *sqlstore.Store {
	if s == nil || s.core == nil {
		return sqlstore.NotOpened("sqlserver")
	}
	return s.core
}

// installedCount is what queries.installed counts on a table set up by this version: five
// indexes and the parking columns.
const installedCount = 6

// SetupInfrastructure creates the schema, the table and its indexes when they are missing (the
// script SetupScript returns), and adds the key column and its index, the parking reason, and the
// claiming instance and its index to a table an older version created. When all exist it changes
// nothing and needs no right to create them. Adding the claiming instance's index reads the table
// once: on a large table, run the script (or `timeoutmill setup`) before the instances start.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	var indexes int
	if err := s.db.QueryRowContext(ctx, s.q.installed).Scan(&indexes); err != nil {
		return fmt.Errorf("sqlserver: set up %s: %w", s.q.table, err)
	}
	if indexes == installedCount {
		return nil
	}
	if err := s.install(ctx); err != nil {
		return fmt.Errorf("sqlserver: set up %s: %w", s.q.table, err)
	}
	return nil
}

func (s *Store) install(ctx context.Context) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	for _, stmt := range append([]string{s.q.lockSetup}, s.q.setupBatches()...) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// maxStringLength bounds Destination and Owner: nvarchar(250), in UTF-16 code units.
const maxStringLength = 250

// validateTimeout checks what the columns require beyond what every store requires.
func validateTimeout(t persistence.Timeout) error {
	for _, f := range []struct{ name, value string }{{"id", t.ID}, {"destination", t.Destination}, {"owner", t.Owner}, {"key", t.Key}} {
		switch {
		case !utf8.ValidString(f.value):
			return fmt.Errorf("%w: %s %q is not valid UTF-8, which nvarchar cannot keep", persistence.ErrInvalidTimeout, f.name, f.value)
		case utf16Len(f.value) > maxStringLength:
			return fmt.Errorf("%w: %s is longer than nvarchar(%d)", persistence.ErrInvalidTimeout, f.name, maxStringLength)
		case f.name != "destination" && strings.HasSuffix(f.value, " "):
			// SQL Server pads strings with spaces to compare them: "a " would be the id "a".
			return fmt.Errorf("%w: %s %q ends with a space, which SQL Server ignores when it compares",
				persistence.ErrInvalidTimeout, f.name, f.value)
		}
	}
	if due := sqlstore.RoundUpMicro(t.Due); due.Year() < 1 || due.Year() > 9999 {
		return fmt.Errorf("%w: due time %s is outside datetime2's years 1 to 9999", persistence.ErrInvalidTimeout, t.Due)
	}
	return nil
}

// storable reports whether s could be a stored id or owner (see validateTimeout). One that could
// not is looked up in no query, where it could find another timeout: the driver would send
// invalid UTF-8 as U+FFFD, and SQL Server compares "a " as "a".
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.HasSuffix(s, " ")
}

// isServerError reports whether err is a SQL Server error with one of the numbers.
func isServerError(err error, numbers ...int32) bool {
	var se mssql.Error
	if !errors.As(err, &se) {
		return false
	}
	if slices.Contains(numbers, se.Number) {
		return true
	}
	return slices.ContainsFunc(se.All, func(e mssql.Error) bool { return slices.Contains(numbers, e.Number) })
}
