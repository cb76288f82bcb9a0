package postgres

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

	// The pgx database/sql driver, registered as "pgx".
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Store keeps timeouts in one PostgreSQL table. It is safe for concurrent use by many goroutines
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
	return &Store{db: db, ownsDB: true, q: newQueries(config.Schema, config.Table)}, nil
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
	return &Store{db: db, q: newQueries(config.Schema, config.Table)}, nil
}

// SetupInfrastructure creates the schema, the table and its indexes when they are missing. When
// all exist it changes nothing and needs no right to create them.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	var installed bool
	err := s.db.QueryRowContext(ctx,
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
	tx, err := s.db.BeginTx(ctx, nil)
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
	if err := validateTimeout(t); err != nil {
		return false, err
	}
	payload := t.Payload
	if payload == nil {
		payload = []byte{}
	}
	res, err := s.db.ExecContext(ctx, s.q.store,
		t.ID, t.Destination, dueMicros(t.Due), t.Owner, payload, persistence.EncodeMetadata(t.Metadata), t.FailureCount)
	n, err := rowsAffected(res, err)
	if err != nil {
		return false, fmt.Errorf("postgres: store %q: %w", t.ID, err)
	}
	return n == 1, nil
}

// validateTimeout adds what text columns require to what every store requires.
func validateTimeout(t persistence.Timeout) error {
	if err := t.Validate(); err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{{"id", t.ID}, {"destination", t.Destination}, {"owner", t.Owner}} {
		if !utf8.ValidString(f.value) {
			return fmt.Errorf("%w: %s %q is not valid UTF-8, which PostgreSQL's text requires", persistence.ErrInvalidTimeout, f.name, f.value)
		}
		if strings.ContainsRune(f.value, 0) {
			return fmt.Errorf("%w: %s %q contains a NUL byte, which PostgreSQL's text cannot hold", persistence.ErrInvalidTimeout, f.name, f.value)
		}
	}
	return nil
}

// Next returns when the earliest timeout becomes claimable: its due time, or its lease's end.
func (s *Store) Next(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullTime
	if err := s.db.QueryRowContext(ctx, s.q.next).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: next: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return next.Time.UTC(), true, nil
}

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
	if limit <= 0 {
		return nil, nil
	}
	if lease < 0 {
		return nil, fmt.Errorf("postgres: claim: lease cannot be negative (%s)", lease)
	}
	// Due times are whole microseconds, so due <= now exactly when due <= now cut to microseconds.
	now = now.UTC().Truncate(time.Microsecond)
	rows, err := s.db.QueryContext(ctx, s.q.claim, now, int64(limit), now.Add(lease).Truncate(time.Microsecond))
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	defer rows.Close()
	type claim struct {
		id  string
		due time.Time
	}
	claims := make([]claim, 0, limit)
	for rows.Next() {
		var c claim
		if err := rows.Scan(&c.id, &c.due); err != nil {
			return nil, fmt.Errorf("postgres: claim: %w", err)
		}
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	// RETURNING keeps no order: sort as the claim picked them, earliest due first.
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
	t := persistence.Timeout{ID: id}
	var metadata []byte
	err := s.db.QueryRowContext(ctx, s.q.peek, id).
		Scan(&t.Destination, &t.Due, &t.Owner, &t.Payload, &metadata, &t.FailureCount)
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.Timeout{}, fmt.Errorf("%w: %q", persistence.ErrNotFound, id)
	}
	if err != nil {
		return persistence.Timeout{}, fmt.Errorf("postgres: peek %q: %w", id, err)
	}
	t.Due = t.Due.UTC()
	if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
		return persistence.Timeout{}, fmt.Errorf("postgres: peek %q: %w", id, err)
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
	n, err := rowsAffected(s.db.ExecContext(ctx, s.q.cancelByOwner, owner))
	if err != nil {
		return 0, fmt.Errorf("postgres: cancel timeouts of %q: %w", owner, err)
	}
	return int(n), nil
}

// execOne runs a statement on one id and reports whether it found the row.
func (s *Store) execOne(ctx context.Context, what, query, id string) (bool, error) {
	n, err := rowsAffected(s.db.ExecContext(ctx, query, id))
	if err != nil {
		return false, fmt.Errorf("postgres: %s %q: %w", what, id, err)
	}
	return n > 0, nil
}

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
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

// dueMicros rounds a due time up to whole microseconds, so a timeout is never claimed early.
func dueMicros(t time.Time) time.Time {
	t = t.UTC()
	if t.Nanosecond()%1000 != 0 {
		t = t.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	return t
}
