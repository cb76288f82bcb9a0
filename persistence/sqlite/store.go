package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	// The pure Go SQLite driver, registered as "sqlite".
	_ "modernc.org/sqlite"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Store keeps timeouts in one SQLite table. It is safe for concurrent use, and several processes
// may share the file: every claim is one atomic statement.
type Store struct {
	// writer makes every change to the table, from one goroutine that commits changes made at
	// the same time together. Open gives its pool one connection, so that no two goroutines of
	// this process ever wait for each other in SQLite's busy handler.
	writer *writer
	// reader runs the statements that only read; in WAL mode they never wait for the writer.
	reader *sql.DB
	// pools are closed by Close: Open's two, none for New (the caller's *sql.DB stays open).
	pools     []*sql.DB
	closeOnce sync.Once
	q         queries
}

var (
	_ persistence.Store     = (*Store)(nil)
	_ persistence.Installer = (*Store)(nil)
	_ persistence.Inspector = (*Store)(nil)
)

// Open opens (creating when missing) the database file at config.Path in WAL mode, creates the
// table and its indexes when missing, and returns a store on it. Close closes the file.
func Open(ctx context.Context, config Config) (*Store, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if config.Path == "" {
		return nil, errors.New("sqlite: invalid config: Path must be set for Open")
	}
	if config.Path == ":memory:" || strings.HasPrefix(config.Path, "file::memory:") {
		return nil, errors.New("sqlite: invalid config: Path must be a file; use persistence/memory for a store in memory")
	}

	writer, err := sql.Open("sqlite", dsn(config, false))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)

	reader, err := sql.Open("sqlite", dsn(config, true))
	if err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	reader.SetMaxOpenConns(readers)
	reader.SetMaxIdleConns(readers)

	s := &Store{writer: newWriter(writer), reader: reader, pools: []*sql.DB{reader, writer}, q: newQueries(config.Table)}
	if err := s.SetupInfrastructure(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store on a *sql.DB the caller opened with the "sqlite" driver, and creates the
// table and its indexes when missing. The caller's pragmas apply: use WAL mode and a busy
// timeout, or limit db to one connection. Close leaves db open.
func New(ctx context.Context, db *sql.DB, config Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlite: db is nil")
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	s := &Store{writer: newWriter(db), reader: db, q: newQueries(config.Table)}
	if err := s.SetupInfrastructure(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// dsn builds the data source name of a pool on the file. The path is escaped as an SQLite URI
// path, so that '?', '#' and '%' in it mean themselves.
func dsn(config Config, readOnly bool) string {
	params := url.Values{}
	params.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", config.BusyTimeout.Milliseconds()))
	params.Add("_pragma", "journal_mode(WAL)")
	params.Add("_pragma", "synchronous("+strings.ToUpper(config.Synchronous)+")")
	if readOnly {
		params.Add("_pragma", "query_only(1)")
	} else {
		// A group's transaction takes the write lock at BEGIN, so that it never has to upgrade a
		// read snapshot another process's commit made stale (SQLITE_BUSY_SNAPSHOT).
		params.Add("_txlock", "immediate")
	}
	path := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(config.Path)
	return "file:" + path + "?" + params.Encode()
}

// SetupInfrastructure creates the table and its indexes when they are missing.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	err := s.writer.do(ctx, func(ctx context.Context, db execer) error {
		for _, stmt := range s.q.setup {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: set up table: %w", err)
	}
	return nil
}

// Store keeps t unless a timeout with its id is stored already.
func (s *Store) Store(ctx context.Context, t persistence.Timeout) (bool, error) {
	if err := t.Validate(); err != nil {
		return false, err
	}
	payload := t.Payload
	if payload == nil {
		payload = []byte{}
	}
	due := dueMicros(t.Due)
	metadata := persistence.EncodeMetadata(t.Metadata)
	var inserted bool
	err := s.writer.do(ctx, func(ctx context.Context, db execer) error {
		n, err := rowsAffected(db.ExecContext(ctx, s.q.store,
			t.ID, t.Destination, due, due, t.Owner, payload, metadata, t.FailureCount))
		inserted = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: store %q: %w", t.ID, err)
	}
	return inserted, nil
}

// Next returns when the earliest timeout becomes claimable: its due time, or its lease's end.
func (s *Store) Next(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := s.reader.QueryRowContext(ctx, s.q.next).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("sqlite: next: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromMicros(next.Int64), true, nil
}

// ClaimDue claims up to limit timeouts claimable at now in one statement, and returns their ids
// earliest due first.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	if lease < 0 {
		return nil, fmt.Errorf("sqlite: claim: lease cannot be negative (%s)", lease)
	}
	var claims []claim
	err := s.writer.do(ctx, func(ctx context.Context, db execer) error {
		var err error
		claims, err = s.claim(ctx, db, now.UnixMicro(), now.Add(lease).UnixMicro(), limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	slices.SortFunc(claims, func(a, b claim) int {
		return cmp.Or(cmp.Compare(a.due, b.due), strings.Compare(a.id, b.id))
	})
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.id
	}
	return ids, nil
}

// claim is a claimed timeout's id and due time (unix microseconds).
type claim struct {
	id  string
	due int64
}

func (s *Store) claim(ctx context.Context, db execer, now, until int64, limit int) ([]claim, error) {
	rows, err := db.QueryContext(ctx, s.q.claim, until, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	claims := make([]claim, 0, min(limit, 1000))
	for rows.Next() {
		var c claim
		if err := rows.Scan(&c.id, &c.due); err != nil {
			return nil, err
		}
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return claims, rows.Close()
}

// Peek returns the timeout with that id, claimed or not.
func (s *Store) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	t := persistence.Timeout{ID: id}
	var (
		due      int64
		metadata []byte
	)
	err := s.reader.QueryRowContext(ctx, s.q.peek, id).
		Scan(&t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount)
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.Timeout{}, fmt.Errorf("%w: %q", persistence.ErrNotFound, id)
	}
	if err != nil {
		return persistence.Timeout{}, fmt.Errorf("sqlite: peek %q: %w", id, err)
	}
	t.Due = fromMicros(due)
	if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
		return persistence.Timeout{}, fmt.Errorf("sqlite: peek %q: %w", id, err)
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
	var n int64
	err := s.writer.do(ctx, func(ctx context.Context, db execer) error {
		var err error
		n, err = rowsAffected(db.ExecContext(ctx, s.q.cancelByOwner, owner))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: cancel timeouts of %q: %w", owner, err)
	}
	return int(n), nil
}

// execOne runs a statement on one id and reports whether it found the row.
func (s *Store) execOne(ctx context.Context, what, query, id string) (bool, error) {
	var n int64
	err := s.writer.do(ctx, func(ctx context.Context, db execer) error {
		var err error
		n, err = rowsAffected(db.ExecContext(ctx, query, id))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: %s %q: %w", what, id, err)
	}
	return n > 0, nil
}

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Close waits for the changes being committed, then closes the database when Open opened it; a
// *sql.DB given to New stays open. Later calls return ErrClosed (reads may return sql.ErrConnDone).
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.writer.close()
		for _, db := range s.pools {
			err = errors.Join(err, db.Close())
		}
	})
	return err
}

// dueMicros rounds a due time up to whole microseconds, so a timeout is never claimed early.
func dueMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Nanosecond()%1000 != 0 {
		us++
	}
	return us
}

func fromMicros(us int64) time.Time {
	return time.UnixMicro(us).UTC()
}
