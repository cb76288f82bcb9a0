package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Store keeps timeouts in one MariaDB/MySQL table. It is safe for concurrent use by many
// goroutines and many processes.
type Store struct {
	db        *sql.DB
	stmts     *statements
	ownsDB    bool
	closeOnce sync.Once
	q         queries
}

var (
	_ persistence.Store     = (*Store)(nil)
	_ persistence.Installer = (*Store)(nil)
	_ persistence.Inspector = (*Store)(nil)
)

// Server error numbers the store acts on.
const (
	errDupEntry     = 1062 // ER_DUP_ENTRY
	errNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
	errLockDeadlock = 1213 // ER_LOCK_DEADLOCK
)

// claimAttempts bounds how often a claim is retried after InnoDB chose it as a deadlock victim.
const claimAttempts = 3

// Open connects to the server at config.DSN and returns a store on a pool of its own, which
// Close closes. It checks that the server answers, but does not create the table: call
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
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mysql: connect: %w", err)
	}
	return &Store{db: db, stmts: newStatements(db), ownsDB: true, q: newQueries(config.Table)}, nil
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
	return &Store{db: db, stmts: newStatements(db), q: newQueries(config.Table)}, nil
}

// SetupInfrastructure creates the table and its indexes when the table is missing. When it
// exists it changes nothing and needs no right to create it.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, s.q.tableExists)
	if err == nil {
		return nil
	}
	if !isServerError(err, errNoSuchTable) {
		return fmt.Errorf("mysql: set up %s: %w", s.q.table, err)
	}
	// IF NOT EXISTS: instances starting together may both get here; the server's metadata lock
	// lets one create and the other find it made.
	if _, err := s.db.ExecContext(ctx, s.q.createTable); err != nil {
		return fmt.Errorf("mysql: set up %s: %w", s.q.table, err)
	}
	return nil
}

// Store keeps t unless a timeout with its id is stored already.
func (s *Store) Store(ctx context.Context, t persistence.Timeout) (bool, error) {
	due, err := validateTimeout(t)
	if err != nil {
		return false, err
	}
	payload := t.Payload
	if payload == nil {
		payload = []byte{}
	}
	// A plain INSERT whose duplicate-key error means "stored already": INSERT IGNORE would hide
	// other errors too, and ON DUPLICATE KEY UPDATE's affected-rows count depends on the DSN's
	// clientFoundRows.
	_, err = s.stmts.exec(ctx, s.q.store,
		[]byte(t.ID), []byte(t.Destination), due, due, []byte(t.Owner), payload,
		persistence.EncodeMetadata(t.Metadata), t.FailureCount)
	if isServerError(err, errDupEntry) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mysql: store %q: %w", t.ID, err)
	}
	return true, nil
}

// Limits of the columns, checked before a server in a lax sql_mode cuts a value silently.
const (
	maxBlob       = 1<<16 - 1 // destination, owner
	maxMediumBlob = 1<<24 - 1 // metadata
)

// validateTimeout adds what the columns require to what every store requires, and returns the
// due time as the store keeps it.
func validateTimeout(t persistence.Timeout) (string, error) {
	if err := t.Validate(); err != nil {
		return "", err
	}
	due := roundUpMicro(t.Due)
	switch {
	case due.Year() < 1000 || due.Year() > 9999:
		return "", fmt.Errorf("%w: due time %s is outside DATETIME's years 1000 to 9999", persistence.ErrInvalidTimeout, t.Due)
	case len(t.Destination) > maxBlob:
		return "", fmt.Errorf("%w: destination is longer than %d bytes", persistence.ErrInvalidTimeout, maxBlob)
	case len(t.Owner) > maxBlob:
		return "", fmt.Errorf("%w: owner is longer than %d bytes", persistence.ErrInvalidTimeout, maxBlob)
	}
	if n := len(persistence.EncodeMetadata(t.Metadata)); n > maxMediumBlob {
		return "", fmt.Errorf("%w: metadata takes %d bytes, more than %d", persistence.ErrInvalidTimeout, n, maxMediumBlob)
	}
	return formatTime(due), nil
}

// Next returns when the earliest timeout becomes claimable: its due time, or its lease's end.
func (s *Store) Next(ctx context.Context) (time.Time, bool, error) {
	var next utcTime
	row, err := s.stmts.queryRow(ctx, s.q.next)
	if err == nil {
		err = row.Scan(&next)
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("mysql: next: %w", err)
	}
	return next.Time, next.Valid, nil
}

// ClaimDue claims up to limit timeouts claimable at now, and returns their ids earliest due
// first.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	if lease < 0 {
		return nil, fmt.Errorf("mysql: claim: lease cannot be negative (%s)", lease)
	}
	// Due times are whole microseconds, so due <= now exactly when due <= now cut to microseconds.
	now = now.UTC().Truncate(time.Microsecond)
	until := now.Add(lease).Truncate(time.Microsecond)
	var (
		claims []claim
		err    error
	)
	for attempt := 1; ; attempt++ {
		claims, err = s.claim(ctx, formatTime(now), formatTime(until), limit)
		if err == nil || !isServerError(err, errLockDeadlock) || attempt == claimAttempts {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: claim: %w", err)
	}
	slices.SortFunc(claims, func(a, b claim) int {
		return cmp.Or(a.due.Compare(b.due), strings.Compare(a.id, b.id))
	})
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.id
	}
	return ids, nil
}

// claim is a claimed timeout's id and due time.
type claim struct {
	id  string
	due time.Time
}

// claim locks the earliest claimable rows, skipping rows another claim holds, and moves them to
// the end of the lease, in one READ COMMITTED transaction: it takes no gap locks, so it never
// blocks a Store of a timeout that falls between the rows it claims.
func (s *Store) claim(ctx context.Context, now, until string, limit int) (claims []claim, err error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := s.stmts.get(ctx, s.q.claimSelect)
	if err != nil {
		return nil, err
	}
	rows, err := tx.StmtContext(ctx, stmt).QueryContext(ctx, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	args := make([]any, 1, limit+1)
	args[0] = until
	for rows.Next() {
		var (
			c   claim
			due utcTime
		)
		if err := rows.Scan(&c.id, &due); err != nil {
			return nil, err
		}
		c.due = due.Time
		claims = append(claims, c)
		args = append(args, []byte(c.id))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if len(claims) > 0 {
		if _, err := tx.ExecContext(ctx, s.q.claimUpdate(len(claims)), args...); err != nil {
			return nil, err
		}
	}
	return claims, tx.Commit()
}

// Peek returns the timeout with that id, claimed or not.
func (s *Store) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	var (
		t        = persistence.Timeout{ID: id}
		due      utcTime
		metadata []byte
	)
	row, err := s.stmts.queryRow(ctx, s.q.peek, []byte(id))
	if err == nil {
		err = row.Scan(&t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.Timeout{}, fmt.Errorf("%w: %q", persistence.ErrNotFound, id)
	}
	if err != nil {
		return persistence.Timeout{}, fmt.Errorf("mysql: peek %q: %w", id, err)
	}
	t.Due = due.Time
	if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
		return persistence.Timeout{}, fmt.Errorf("mysql: peek %q: %w", id, err)
	}
	return t, nil
}

// Remove deletes the timeout with that id once it was forwarded.
func (s *Store) Remove(ctx context.Context, id string) (bool, error) {
	return s.execOne(ctx, "remove", s.q.delete, id)
}

// Cancel deletes the timeout with that id so it is never delivered.
func (s *Store) Cancel(ctx context.Context, id string) (bool, error) {
	return s.execOne(ctx, "cancel", s.q.delete, id)
}

// IncrementFailureCount records a failed forwarding attempt.
func (s *Store) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	return s.execOne(ctx, "increment failure count of", s.q.incrementFailureCount, id)
}

// CancelByOwner deletes every timeout of owner. An empty owner cancels nothing: it means "no
// owner", not every timeout without one.
func (s *Store) CancelByOwner(ctx context.Context, owner string) (int, error) {
	n, err := rowsAffected(s.stmts.exec(ctx, s.q.cancelByOwner, []byte(owner)))
	if err != nil {
		return 0, fmt.Errorf("mysql: cancel timeouts of %q: %w", owner, err)
	}
	return int(n), nil
}

// execOne runs a statement on one id and reports whether it found the row.
func (s *Store) execOne(ctx context.Context, what, query, id string) (bool, error) {
	n, err := rowsAffected(s.stmts.exec(ctx, query, []byte(id)))
	if err != nil {
		return false, fmt.Errorf("mysql: %s %q: %w", what, id, err)
	}
	return n > 0, nil
}

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Close closes the statements the store prepared, and the pool Open opened; a *sql.DB given to
// New stays open.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.stmts.close()
		if s.ownsDB {
			err = errors.Join(err, s.db.Close())
		}
	})
	return err
}

func isServerError(err error, number uint16) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}
