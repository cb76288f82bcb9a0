package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Stats counts the stored timeouts at now: all of them, those due, those a poller holds, and
// each destination's; and their earliest and latest due times. Unless the dialect has its own
// (Dialect.Stats), it reads the whole table: it is for operators, not for a poll loop.
func (s *Store) Stats(ctx context.Context, now time.Time) (persistence.Stats, error) {
	if err := Opened(s); err != nil {
		return persistence.Stats{}, err
	}
	d := &s.d
	// Due times are whole microseconds: due <= now exactly when due <= now cut to microseconds.
	if d.Own.Stats != nil {
		return d.Own.Stats(ctx, now.UTC().Truncate(time.Microsecond))
	}
	var (
		st               persistence.Stats
		dueNow, claimed  sql.NullInt64 // SUM of no rows is NULL
		parked           sql.NullInt64
		earliest, latest = s.timeValue(), s.timeValue()
	)
	err := queryRow(ctx, d.Run.Reader, s.st.Stats.SQL, s.st.Stats.Args(NowParams{Now: now.UTC().Truncate(time.Microsecond)}),
		&st.Pending, &dueNow, &claimed, &parked, earliest, latest)
	if err != nil {
		return persistence.Stats{}, fmt.Errorf("%s: stats: %w", d.Name, err)
	}
	st.DueNow, st.Claimed, st.Parked = int(dueNow.Int64), int(claimed.Int64), int(parked.Int64)
	st.Earliest, st.Latest = earliest.t, latest.t
	rows, err := d.Run.Reader.QueryContext(ctx, s.st.StatsByDestination.SQL)
	if err != nil {
		return persistence.Stats{}, fmt.Errorf("%s: stats: %w", d.Name, err)
	}
	defer rows.Close()
	st.ByDestination = map[string]int{}
	for rows.Next() {
		var (
			destination string
			n           int
		)
		if err := rows.Scan(&destination, &n); err != nil {
			return persistence.Stats{}, fmt.Errorf("%s: stats: %w", d.Name, err)
		}
		st.ByDestination[destination] = n
	}
	if err := rows.Err(); err != nil {
		return persistence.Stats{}, fmt.Errorf("%s: stats: %w", d.Name, err)
	}
	return st, nil
}

// List returns a page of timeouts in due time order, then id, without their payloads.
func (s *Store) List(ctx context.Context, opts persistence.ListOptions) ([]persistence.Timeout, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: list: %w", s.d.Name, err)
		}
		for _, v := range []string{opts.Owner, opts.Key} {
			if v != "" && !s.d.Check.Storable(v) {
				return nil, nil // no timeout has that owner or key (see Dialect.Storable)
			}
		}
	}
	query, args := ListStatement(s, opts)
	rows, err := s.d.Run.Reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: list: %w", s.d.Name, err)
	}
	defer rows.Close()
	var list []persistence.Timeout
	for rows.Next() {
		r := s.newRow()
		if err := rows.Scan(&r.t.ID, &r.t.Destination, &r.due, &r.t.Owner, &r.metadata, &r.t.FailureCount, &r.t.Key, &r.t.Parked); err != nil {
			return nil, fmt.Errorf("%s: list: %w", s.d.Name, err)
		}
		if err := r.finish(); err != nil {
			return nil, fmt.Errorf("%s: list %q: %w", s.d.Name, r.t.ID, err)
		}
		list = append(list, r.t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list: %w", s.d.Name, err)
	}
	return list, nil
}

// ListStatement returns the statement List runs for opts on s, and its arguments: a WHERE made
// of the filters that are set, the keyset condition of opts.After, ORDER BY due, id and the
// limit. The keyset is written as due >= d AND (due > d OR due = d AND id > i), whose first
// term bounds an index scan on (due, id) where a row comparison or an OR alone might not.
func ListStatement(s *Store, opts persistence.ListOptions) (string, []any) {
	d := &s.d
	l := d.SQL.List
	limit := opts.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	b := listBinder{b: &d.Bind}
	timeParam := func(name string, t time.Time) string {
		p := b.bind(name, d.Bind.time(t))
		if l.TimeParam != nil {
			p = l.TimeParam(p)
		}
		return p
	}
	var where []string
	if opts.Owner != "" {
		// <> '' matches the partial owner indexes.
		where = append(where, l.Owner+" = "+b.bind("owner", d.Bind.text(opts.Owner))+" AND "+l.Owner+" <> ''")
	}
	if opts.Destination != "" {
		where = append(where, l.Destination+" = "+b.bind("destination", d.Bind.text(opts.Destination)))
	}
	if opts.Key != "" {
		where = append(where, l.Key+" = "+b.bind("key", d.Bind.text(opts.Key)))
	}
	if opts.Parked {
		where = append(where, l.Parked+" IS NOT NULL")
	}
	if !opts.DueFrom.IsZero() {
		where = append(where, l.Due+" >= "+timeParam("dueFrom", RoundUpMicro(opts.DueFrom)))
	}
	if !opts.DueBefore.IsZero() {
		where = append(where, l.Due+" < "+timeParam("dueBefore", RoundUpMicro(opts.DueBefore)))
	}
	if opts.After.ID != "" {
		// Stored due times are whole microseconds, as every listed one is.
		after := opts.After.Due.UTC().Truncate(time.Microsecond)
		due := func() string { return timeParam("afterDue", after) }
		where = append(where, fmt.Sprintf("%[1]s >= %[3]s AND (%[1]s > %[4]s OR %[1]s = %[5]s AND %[2]s > %[6]s)",
			l.Due, l.ID, due(), due(), due(), b.bind("afterID", d.Bind.text(opts.After.ID))))
	}
	var q strings.Builder
	q.WriteString("SELECT ")
	if l.Top {
		q.WriteString("TOP (" + b.bind("limit", int64(limit)) + ") ")
	}
	q.WriteString(l.From)
	if len(where) > 0 {
		q.WriteString("\nWHERE " + strings.Join(where, "\n\tAND "))
	}
	q.WriteString("\nORDER BY " + l.Due + ", " + l.ID)
	if !l.Top {
		q.WriteString(" LIMIT " + b.bind("limit", int64(limit)))
	}
	return q.String(), b.args
}

// listBinder binds the parameters of List's statement, which is made for the filters set, as
// the dialect does: ? in order, $n numbered, or @name, a name given twice bound once where the
// style allows.
type listBinder struct {
	b     *Binding
	names []string
	args  []any
}

// bind returns the placeholder of the parameter name with value v.
func (b *listBinder) bind(name string, v any) string {
	if b.b.Style != Positional {
		if i := slices.Index(b.names, name); i >= 0 {
			return b.placeholder(i)
		}
	}
	b.names = append(b.names, name)
	if b.b.Style == Named {
		v = sql.Named(name, v)
	}
	b.args = append(b.args, v)
	return b.placeholder(len(b.args) - 1)
}

func (b *listBinder) placeholder(i int) string {
	switch b.b.Style {
	case Named:
		return "@" + b.names[i]
	case Numbered:
		return "$" + strconv.Itoa(i+1)
	}
	return "?"
}
