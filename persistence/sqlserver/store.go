package sqlserver

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
	"unicode/utf8"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Store keeps timeouts in one SQL Server table. It is safe for concurrent use by many goroutines
// and many processes.
type Store struct {
	db        *sql.DB
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
	return &Store{db: db, ownsDB: true, q: newQueries(config.Schema, config.Table)}, nil
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
	return &Store{db: db, q: newQueries(config.Schema, config.Table)}, nil
}

// SetupInfrastructure creates the schema, the table and its indexes when they are missing (the
// script SetupScript returns). When all exist it changes nothing and needs no right to create
// them.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	var indexes int
	if err := s.db.QueryRowContext(ctx, s.q.installed).Scan(&indexes); err != nil {
		return fmt.Errorf("sqlserver: set up %s: %w", s.q.table, err)
	}
	if indexes == 3 {
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
	var n int64
	err = s.db.QueryRowContext(ctx, s.q.store,
		sql.Named("id", t.ID),
		sql.Named("destination", t.Destination),
		sql.Named("state", payload),
		sql.Named("due", utc(due)),
		sql.Named("headers", persistence.EncodeMetadata(t.Metadata)),
		sql.Named("failureCount", int64(t.FailureCount)),
		sql.Named("owner", t.Owner),
	).Scan(&n)
	if isServerError(err, errDuplicateKey, errDuplicateKeyIndex) {
		return false, nil // stored by another Store of the same id at the same moment
	}
	if err != nil {
		return false, fmt.Errorf("sqlserver: store %q: %w", t.ID, err)
	}
	return n == 1, nil
}

// maxStringLength bounds Destination and Owner: nvarchar(250), in UTF-16 code units.
const maxStringLength = 250

// validateTimeout adds what the columns require to what every store requires, and returns the
// due time as the store keeps it.
func validateTimeout(t persistence.Timeout) (time.Time, error) {
	if err := t.Validate(); err != nil {
		return time.Time{}, err
	}
	for _, f := range []struct{ name, value string }{{"id", t.ID}, {"destination", t.Destination}, {"owner", t.Owner}} {
		switch {
		case !utf8.ValidString(f.value):
			return time.Time{}, fmt.Errorf("%w: %s %q is not valid UTF-8, which nvarchar cannot keep", persistence.ErrInvalidTimeout, f.name, f.value)
		case utf16Len(f.value) > maxStringLength:
			return time.Time{}, fmt.Errorf("%w: %s is longer than nvarchar(%d)", persistence.ErrInvalidTimeout, f.name, maxStringLength)
		case f.name != "destination" && strings.HasSuffix(f.value, " "):
			// SQL Server pads strings with spaces to compare them: "a " would be the id "a".
			return time.Time{}, fmt.Errorf("%w: %s %q ends with a space, which SQL Server ignores when it compares",
				persistence.ErrInvalidTimeout, f.name, f.value)
		}
	}
	due := roundUpMicro(t.Due)
	if due.Year() < 1 || due.Year() > 9999 {
		return time.Time{}, fmt.Errorf("%w: due time %s is outside datetime2's years 1 to 9999", persistence.ErrInvalidTimeout, t.Due)
	}
	return due, nil
}

// Next returns when the earliest timeout becomes claimable: its due time, or its lease's end.
func (s *Store) Next(ctx context.Context) (time.Time, bool, error) {
	var next utcTime
	if err := s.db.QueryRowContext(ctx, s.q.next).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("sqlserver: next: %w", err)
	}
	return next.Time, next.Valid, nil
}

// ClaimDue claims up to limit timeouts claimable at now in one statement, and returns their ids
// earliest due first.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	if lease < 0 {
		return nil, fmt.Errorf("sqlserver: claim: lease cannot be negative (%s)", lease)
	}
	// Due times are whole microseconds, so due <= now exactly when due <= now cut to microseconds.
	now = now.UTC().Truncate(time.Microsecond)
	until := now.Add(lease).Truncate(time.Microsecond)
	rows, err := s.db.QueryContext(ctx, s.q.claim,
		sql.Named("limit", int64(limit)),
		sql.Named("now", utc(now)),
		sql.Named("until", utc(until)),
	)
	if err != nil {
		return nil, fmt.Errorf("sqlserver: claim: %w", err)
	}
	defer rows.Close()
	type claim struct {
		id  string
		due time.Time
	}
	claims := make([]claim, 0, limit)
	for rows.Next() {
		var (
			c   claim
			due utcTime
		)
		if err := rows.Scan(&c.id, &due); err != nil {
			return nil, fmt.Errorf("sqlserver: claim: %w", err)
		}
		c.due = due.Time
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlserver: claim: %w", err)
	}
	// OUTPUT keeps no order: sort as the claim picked them, earliest due first.
	slices.SortFunc(claims, func(a, b claim) int {
		return cmp.Or(a.due.Compare(b.due), strings.Compare(a.id, b.id))
	})
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.id
	}
	return ids, nil
}

// Peek returns the timeout with that id, claimed or not.
func (s *Store) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	if err := ctx.Err(); err != nil {
		return persistence.Timeout{}, fmt.Errorf("sqlserver: peek %q: %w", id, err)
	}
	if !storable(id) {
		return persistence.Timeout{}, fmt.Errorf("%w: %q", persistence.ErrNotFound, id)
	}
	var (
		t        = persistence.Timeout{ID: id}
		due      utcTime
		metadata []byte
	)
	err := s.db.QueryRowContext(ctx, s.q.peek, sql.Named("id", id)).
		Scan(&t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount)
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.Timeout{}, fmt.Errorf("%w: %q", persistence.ErrNotFound, id)
	}
	if err != nil {
		return persistence.Timeout{}, fmt.Errorf("sqlserver: peek %q: %w", id, err)
	}
	t.Due = due.Time
	if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
		return persistence.Timeout{}, fmt.Errorf("sqlserver: peek %q: %w", id, err)
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
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("sqlserver: cancel timeouts of %q: %w", owner, err)
	}
	if owner == "" || !storable(owner) {
		return 0, nil
	}
	n, err := s.count(ctx, s.q.cancelByOwner, sql.Named("owner", owner))
	if err != nil {
		return 0, fmt.Errorf("sqlserver: cancel timeouts of %q: %w", owner, err)
	}
	return int(n), nil
}

// execOne runs a statement on one id and reports whether it found the row.
func (s *Store) execOne(ctx context.Context, what, query, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("sqlserver: %s %q: %w", what, id, err)
	}
	if !storable(id) {
		return false, nil
	}
	n, err := s.count(ctx, query, sql.Named("id", id))
	if err != nil {
		return false, fmt.Errorf("sqlserver: %s %q: %w", what, id, err)
	}
	return n > 0, nil
}

// storable reports whether s could be a stored id or owner (see validateTimeout). One that could
// not is looked up in no query, where it could find another timeout: the driver would send
// invalid UTF-8 as U+FFFD, and SQL Server compares "a " as "a".
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.HasSuffix(s, " ")
}

// count runs a statement that ends in SELECT @@ROWCOUNT and returns the count.
func (s *Store) count(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, query, args...).Scan(&n)
	return n, err
}

// Close closes the pool Open opened; a *sql.DB given to New stays open.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.ownsDB {
			err = s.db.Close()
		}
	})
	return err
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
