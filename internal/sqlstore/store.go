package sqlstore

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

	"github.com/timeoutmill/timeoutmill/persistence"
)

// defaultListLimit is persistence.ListOptions' documented default.
const defaultListLimit = 100

// Store is a timeout store on one table, run as its Dialect says. Its methods are those of
// persistence.Store, Inspector and Handover and the batch calls, and return errors that start
// with the dialect's name.
type Store struct {
	d Dialect
	// st are d.SQL's statements, compiled for d.Bind.
	st        *Statements
	holds     holds
	closeOnce sync.Once
	// notOpened is the error of every call on a store no Open or New made.
	notOpened error
}

// New returns a store run as d says. It fails when a statement of d.SQL does not compile (see
// Compile): a mistake in the backend, which its tests catch.
func New(d Dialect) (*Store, error) {
	if d.Run.Reader == nil {
		d.Run.Reader = d.DB
	}
	if d.Run.Writer == nil {
		d.Run.Writer = d.DB
	}
	s := &Store{d: d}
	st, err := CompileQueries(d.SQL, &s.d.Bind)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Name, err)
	}
	s.st = st
	return s, nil
}

// StatementsOf returns the compiled statements of s, for a backend that runs some itself.
func StatementsOf(s *Store) *Statements { return s.st }

// NotOpened returns a store whose every call fails, saying that it was not opened: what a
// backend's zero or nil *Store runs on, so that it fails rather than panics.
func NotOpened(name string) *Store {
	return &Store{notOpened: fmt.Errorf("%s: the store was not opened with Open or New", name)}
}

// Opened returns nil, or the error of a store that was not opened: a nil one (the core of a
// backend's zero-value Store) or one NotOpened made. It and DB are functions, not methods, so
// that a backend embedding the core shows only the persistence calls.
func Opened(s *Store) error {
	if s == nil {
		return errNotOpened
	}
	return s.notOpened
}

// errNotOpened is the error of every call on a backend's zero-value Store.
var errNotOpened = errors.New("timeoutmill: the store was not opened with its package's Open or New")

// DB returns the pool of the store, nil when it was not opened.
func DB(s *Store) *sql.DB {
	if s == nil {
		return nil
	}
	return s.d.DB
}

// DatabaseTime returns the database's current time (Queries.Now), for a backend's
// persistence.Clocked. It fails with persistence.ErrUnsupported when the dialect has no Now.
func DatabaseTime(ctx context.Context, s *Store) (time.Time, error) {
	if err := Opened(s); err != nil {
		return time.Time{}, err
	}
	if s.st.Now.SQL == "" {
		return time.Time{}, fmt.Errorf("%s: the database's time: %w", s.d.Name, persistence.ErrUnsupported)
	}
	now := s.timeValue()
	if err := queryRow(ctx, s.d.Run.Reader, s.st.Now.SQL, nil, now); err != nil {
		return time.Time{}, fmt.Errorf("%s: the database's time: %w", s.d.Name, err)
	}
	if !now.valid {
		return time.Time{}, fmt.Errorf("%s: the database's time is NULL", s.d.Name)
	}
	return now.t, nil
}

// Store keeps t unless a timeout with its id is stored already.
func (s *Store) Store(ctx context.Context, t persistence.Timeout) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	if err := s.validate(t, true); err != nil {
		return false, err
	}
	d := &s.d
	n, err := s.writeCount(ctx, s.st.Store.SQL, s.st.Store.Args(storeParams(t)))
	if d.Errors.IsDuplicate != nil && d.Errors.IsDuplicate(err) {
		return false, nil // stored by another Store of the same id at the same moment
	}
	if err != nil {
		return false, fmt.Errorf("%s: store %q: %w", d.Name, t.ID, err)
	}
	return n == 1, nil
}

// validate checks t as every store and then the dialect's columns require; unkeyed refuses a
// key, as Store and StoreMany do.
func (s *Store) validate(t persistence.Timeout, unkeyed bool) error {
	check := t.Validate
	if unkeyed {
		check = t.ValidateUnkeyed
	}
	if err := check(); err != nil {
		return err
	}
	if s.d.Check.Validate != nil {
		return s.d.Check.Validate(t)
	}
	return nil
}

// Next returns when the earliest timeout becomes claimable: its due time, or its lease's end.
func (s *Store) Next(ctx context.Context) (time.Time, bool, error) {
	if err := Opened(s); err != nil {
		return time.Time{}, false, err
	}
	next := s.timeValue()
	if err := queryRow(ctx, s.d.Run.Reader, s.st.Next.SQL, nil, next); err != nil {
		return time.Time{}, false, fmt.Errorf("%s: next: %w", s.d.Name, err)
	}
	return next.t, next.valid, nil
}

// ClaimDue claims up to limit timeouts claimable at now, and returns their ids earliest due
// first.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	return s.claimDue(ctx, "", now, limit, lease)
}

// claimDue claims for by, the instance name or "" for none.
func (s *Store) claimDue(ctx context.Context, by string, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	if lease < 0 {
		return nil, fmt.Errorf("%s: claim: lease cannot be negative (%s)", s.d.Name, lease)
	}
	// Due times are whole microseconds, so due <= now exactly when due <= now cut to microseconds.
	now = now.UTC().Truncate(time.Microsecond)
	until := now.Add(lease).Truncate(time.Microsecond)
	var (
		claims []Claimed
		err    error
	)
	p := ClaimParams{Now: now, Until: until, Limit: limit, By: by}
	if s.d.Own.Claim != nil {
		claims, err = s.d.Own.Claim(ctx, p)
	} else {
		err = s.write(ctx, false, func(ctx context.Context, q Querier) error {
			claims, err = s.claim(ctx, q, p)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("%s: claim: %w", s.d.Name, err)
	}
	// The statements return rows in no order: sort as the claim picked them, earliest due first.
	slices.SortFunc(claims, func(a, b Claimed) int {
		return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.ID, b.ID))
	})
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.ID
	}
	return ids, nil
}

func (s *Store) claim(ctx context.Context, q Querier, p ClaimParams) ([]Claimed, error) {
	rows, err := q.QueryContext(ctx, s.st.Claim.SQL, s.st.Claim.Args(p)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	claims := make([]Claimed, 0, min(p.Limit, 1000))
	due := s.timeValue()
	for rows.Next() {
		var c Claimed
		if err := rows.Scan(&c.ID, due); err != nil {
			return nil, err
		}
		c.Due = due.t
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return claims, rows.Close()
}

// Peek returns the timeout with that id, claimed or not.
func (s *Store) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	if err := Opened(s); err != nil {
		return persistence.Timeout{}, err
	}
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return persistence.Timeout{}, fmt.Errorf("%s: peek %q: %w", s.d.Name, id, err)
		}
		if !s.d.Check.Storable(id) {
			return persistence.Timeout{}, fmt.Errorf("%w: %q", persistence.ErrNotFound, id)
		}
	}
	r := s.newRow()
	r.t.ID = id
	err := queryRow(ctx, s.d.Run.Reader, s.st.Peek.SQL, s.st.Peek.Args(IDParams{ID: id}),
		&r.t.Destination, &r.due, &r.t.Owner, &r.t.Payload, &r.metadata, &r.t.FailureCount, &r.t.Key, &r.t.Parked)
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.Timeout{}, fmt.Errorf("%w: %q", persistence.ErrNotFound, id)
	}
	if err == nil {
		err = r.finish()
	}
	if err != nil {
		return persistence.Timeout{}, fmt.Errorf("%s: peek %q: %w", s.d.Name, id, err)
	}
	return r.t, nil
}

// Remove deletes the timeout with that id once it was forwarded.
func (s *Store) Remove(ctx context.Context, id string) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	return s.execOne(ctx, "remove", &s.st.Delete, id)
}

// Cancel deletes the timeout with that id so it is never delivered.
func (s *Store) Cancel(ctx context.Context, id string) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	return s.execOne(ctx, "cancel", &s.st.Delete, id)
}

// IncrementFailureCount records a failed forwarding attempt.
func (s *Store) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	return s.execOne(ctx, "increment failure count of", &s.st.IncrementFailureCount, id)
}

// CancelByOwner deletes every timeout of owner. An empty owner cancels nothing: it means "no
// owner", not every timeout without one.
func (s *Store) CancelByOwner(ctx context.Context, owner string) (int, error) {
	if err := Opened(s); err != nil {
		return 0, err
	}
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("%s: cancel timeouts of %q: %w", s.d.Name, owner, err)
		}
		if owner == "" || !s.d.Check.Storable(owner) {
			return 0, nil
		}
	}
	n, err := s.writeCount(ctx, s.st.CancelByOwner.SQL, s.st.CancelByOwner.Args(OwnerParams{Owner: owner}))
	if err != nil {
		return 0, fmt.Errorf("%s: cancel timeouts of %q: %w", s.d.Name, owner, err)
	}
	return int(n), nil
}

// execOne runs a statement on one id and reports whether it found the row.
func (s *Store) execOne(ctx context.Context, what string, stmt *Stmt[IDParams], id string) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("%s: %s %q: %w", s.d.Name, what, id, err)
		}
		if !s.d.Check.Storable(id) {
			return false, nil
		}
	}
	n, err := s.writeCount(ctx, stmt.SQL, stmt.Args(IDParams{ID: id}))
	if err != nil {
		return false, fmt.Errorf("%s: %s %q: %w", s.d.Name, what, id, err)
	}
	return n > 0, nil
}

// Close releases every name HoldInstance holds and what the backend opened, once.
func (s *Store) Close() error {
	if err := Opened(s); err != nil {
		return err
	}
	var err error
	s.closeOnce.Do(func() {
		err = s.holds.releaseAll()
		if s.d.Close != nil {
			err = errors.Join(err, s.d.Close())
		}
	})
	return err
}

// storeParams are the columns of t as Store and Schedule insert them.
func storeParams(t persistence.Timeout) StoreParams {
	payload := t.Payload
	if payload == nil {
		payload = []byte{}
	}
	return StoreParams{ID: t.ID, Destination: t.Destination, Owner: t.Owner, Due: RoundUpMicro(t.Due), Payload: payload,
		Metadata: persistence.EncodeMetadata(t.Metadata), FailureCount: t.FailureCount}
}

// write runs a change: on Writer, or in a transaction on DB when tx, or as Dialect.Write says.
func (s *Store) write(ctx context.Context, tx bool, run func(ctx context.Context, q Querier) error) error {
	if s.d.Run.Write != nil {
		return s.d.Run.Write(ctx, tx, run)
	}
	if !tx {
		return run(ctx, s.d.Run.Writer)
	}
	t, err := s.d.DB.BeginTx(ctx, s.d.Run.TxOptions)
	if err != nil {
		return err
	}
	if err := run(ctx, t); err != nil {
		return errors.Join(err, t.Rollback())
	}
	return t.Commit()
}

// writeCount runs one changing statement and returns how many rows it changed.
func (s *Store) writeCount(ctx context.Context, query string, args []any) (int64, error) {
	if s.d.Run.Write == nil {
		return s.count(ctx, s.d.Run.Writer, query, args)
	}
	var n int64
	err := s.d.Run.Write(ctx, false, func(ctx context.Context, q Querier) error {
		var err error
		n, err = s.count(ctx, q, query, args)
		return err
	})
	return n, err
}

func (s *Store) count(ctx context.Context, q Querier, query string, args []any) (int64, error) {
	if s.d.Bind.RowCount {
		var n int64
		err := queryRow(ctx, q, query, args, &n)
		return n, err
	}
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow scans the first row of a query into dest, or returns sql.ErrNoRows, as
// sql.Row.Scan does.
func queryRow(ctx context.Context, q Querier, query string, args []any, dest ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

// QueryIDs runs a statement that returns ids.
func QueryIDs(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, query string, args []any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	return ids, nil
}
