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
	d         Dialect
	holds     holds
	closeOnce sync.Once
	// notOpened is the error of every call on a store no Open or New made.
	notOpened error
}

// New returns a store run as d says.
func New(d Dialect) *Store {
	if d.Reader == nil {
		d.Reader = d.DB
	}
	if d.Writer == nil {
		d.Writer = d.DB
	}
	if d.Text == nil {
		d.Text = func(s string) any { return s }
	}
	if d.IDArgs == nil {
		text := d.Text
		d.IDArgs = func(ids []string) []any {
			args := make([]any, len(ids))
			for i, id := range ids {
				args[i] = text(id)
			}
			return args
		}
	}
	return &Store{d: d}
}

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
	if s.d.Queries.Now == "" {
		return time.Time{}, fmt.Errorf("%s: the database's time: %w", s.d.Name, persistence.ErrUnsupported)
	}
	now := s.timeValue()
	if err := queryRow(ctx, s.d.Reader, s.d.Queries.Now, nil, now); err != nil {
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
	payload := t.Payload
	if payload == nil {
		payload = []byte{}
	}
	d := &s.d
	due := d.Time(RoundUpMicro(t.Due))
	args := s.args(storeParams, d.Text(t.ID), d.Text(t.Destination), due, due, d.Text(t.Owner), payload,
		persistence.EncodeMetadata(t.Metadata), int64(t.FailureCount))
	n, err := s.writeCount(ctx, d.Queries.Store, args)
	if d.IsDuplicate != nil && d.IsDuplicate(err) {
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
	if s.d.Validate != nil {
		return s.d.Validate(t)
	}
	return nil
}

// Next returns when the earliest timeout becomes claimable: its due time, or its lease's end.
func (s *Store) Next(ctx context.Context) (time.Time, bool, error) {
	if err := Opened(s); err != nil {
		return time.Time{}, false, err
	}
	next := s.timeValue()
	if err := queryRow(ctx, s.d.Reader, s.d.Queries.Next, nil, next); err != nil {
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
	return s.claimDue(ctx, nil, now, limit, lease)
}

// claimDue claims for by, the bound instance name or nil for none.
func (s *Store) claimDue(ctx context.Context, by any, now time.Time, limit int, lease time.Duration) ([]string, error) {
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
	if s.d.Claim != nil {
		claims, err = s.d.Claim(ctx, now, until, limit, by)
	} else {
		err = s.write(ctx, false, func(ctx context.Context, q Querier) error {
			claims, err = s.claim(ctx, q, now, until, limit, by)
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

func (s *Store) claim(ctx context.Context, q Querier, now, until time.Time, limit int, by any) ([]Claimed, error) {
	d := &s.d
	rows, err := q.QueryContext(ctx, d.Queries.Claim, s.args(claimParams, d.Time(until), d.Time(now), int64(limit), by)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	claims := make([]Claimed, 0, min(limit, 1000))
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
	if s.d.Storable != nil {
		if err := ctx.Err(); err != nil {
			return persistence.Timeout{}, fmt.Errorf("%s: peek %q: %w", s.d.Name, id, err)
		}
		if !s.d.Storable(id) {
			return persistence.Timeout{}, fmt.Errorf("%w: %q", persistence.ErrNotFound, id)
		}
	}
	r := s.newRow()
	r.t.ID = id
	err := queryRow(ctx, s.d.Reader, s.d.Queries.Peek, s.args(idParams, s.d.Text(id)),
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
	return s.execOne(ctx, "remove", s.d.Queries.Delete, id)
}

// Cancel deletes the timeout with that id so it is never delivered.
func (s *Store) Cancel(ctx context.Context, id string) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	return s.execOne(ctx, "cancel", s.d.Queries.Delete, id)
}

// IncrementFailureCount records a failed forwarding attempt.
func (s *Store) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	return s.execOne(ctx, "increment failure count of", s.d.Queries.IncrementFailureCount, id)
}

// CancelByOwner deletes every timeout of owner. An empty owner cancels nothing: it means "no
// owner", not every timeout without one.
func (s *Store) CancelByOwner(ctx context.Context, owner string) (int, error) {
	if err := Opened(s); err != nil {
		return 0, err
	}
	if s.d.Storable != nil {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("%s: cancel timeouts of %q: %w", s.d.Name, owner, err)
		}
		if owner == "" || !s.d.Storable(owner) {
			return 0, nil
		}
	}
	n, err := s.writeCount(ctx, s.d.Queries.CancelByOwner, s.args(ownerParams, s.d.Text(owner)))
	if err != nil {
		return 0, fmt.Errorf("%s: cancel timeouts of %q: %w", s.d.Name, owner, err)
	}
	return int(n), nil
}

// execOne runs a statement on one id and reports whether it found the row.
func (s *Store) execOne(ctx context.Context, what, query, id string) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	if s.d.Storable != nil {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("%s: %s %q: %w", s.d.Name, what, id, err)
		}
		if !s.d.Storable(id) {
			return false, nil
		}
	}
	n, err := s.writeCount(ctx, query, s.args(idParams, s.d.Text(id)))
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

// args binds vals, which have those names, as the dialect does: in their places, or, with
// numbered or named parameters, each name once, at its first place.
func (s *Store) args(names []string, vals ...any) []any {
	if !s.d.Named && !s.d.Numbered {
		return vals
	}
	out := vals[:0] // vals is this call's own
	for i, v := range vals {
		if slices.Contains(names[:i], names[i]) {
			continue
		}
		if s.d.Named {
			v = sql.Named(names[i], v)
		}
		out = append(out, v)
	}
	return out
}

// write runs a change: on Writer, or in a transaction on DB when tx, or as Dialect.Write says.
func (s *Store) write(ctx context.Context, tx bool, run func(ctx context.Context, q Querier) error) error {
	if s.d.Write != nil {
		return s.d.Write(ctx, tx, run)
	}
	if !tx {
		return run(ctx, s.d.Writer)
	}
	t, err := s.d.DB.BeginTx(ctx, s.d.TxOptions)
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
	if s.d.Write == nil {
		return s.count(ctx, s.d.Writer, query, args)
	}
	var n int64
	err := s.d.Write(ctx, false, func(ctx context.Context, q Querier) error {
		var err error
		n, err = s.count(ctx, q, query, args)
		return err
	})
	return n, err
}

func (s *Store) count(ctx context.Context, q Querier, query string, args []any) (int64, error) {
	if s.d.RowCount {
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
