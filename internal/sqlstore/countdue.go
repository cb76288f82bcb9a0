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

// CountDue counts the timeouts that are not parked and are due before each of bounds
// (persistence.DueCounter), in one statement: a sum per bound over the rows due before the
// latest one. It reads the rows through an index on due times where the table has one.
func (s *Store) CountDue(ctx context.Context, bounds []time.Time) ([]int, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	d := &s.d
	l := d.SQL.List
	if l.Table == "" {
		return nil, fmt.Errorf("%s: count due: %w", d.Name, persistence.ErrUnsupported)
	}
	sorted, err := SortBounds(bounds)
	if err != nil {
		return nil, fmt.Errorf("%s: count due: %w", d.Name, err)
	}
	if len(sorted) == 0 {
		return []int{}, nil
	}
	b := listBinder{b: &d.Bind}
	param := func(i int, t time.Time) string {
		p := b.bind("bound"+strconv.Itoa(i), d.Bind.time(t))
		if l.TimeParam != nil {
			p = l.TimeParam(p)
		}
		return p
	}
	sums := make([]string, len(sorted))
	for i, t := range sorted {
		sums[i] = "SUM(CASE WHEN " + l.Due + " < " + param(i, t) + " THEN 1 ELSE 0 END)"
	}
	// The last sum's bound is bound again for the WHERE (positional parameters cannot repeat).
	query := "SELECT " + strings.Join(sums, ", ") + "\nFROM " + l.Table +
		"\nWHERE " + l.Due + " < " + param(len(sorted), sorted[len(sorted)-1]) + " AND " + l.Parked + " IS NULL"
	sumsOf := make([]sql.NullInt64, len(sorted)) // SUM of no rows is NULL
	dest := make([]any, len(sorted))
	for i := range sumsOf {
		dest[i] = &sumsOf[i]
	}
	if err := queryRow(ctx, d.Run.Reader, query, b.args, dest...); err != nil {
		return nil, fmt.Errorf("%s: count due: %w", d.Name, err)
	}
	counts := make([]int, len(sorted))
	for i, n := range sumsOf {
		counts[i] = int(n.Int64)
	}
	return CountsOf(bounds, sorted, counts), nil
}

// SortBounds checks CountDue's bounds (each in persistence.MinDue..MaxDue) and returns them
// rounded up to whole microseconds, in UTC, sorted, without repeats: due < bound exactly when
// due < bound rounded up, since due times are whole microseconds.
func SortBounds(bounds []time.Time) ([]time.Time, error) {
	sorted := make([]time.Time, 0, len(bounds))
	for _, b := range bounds {
		if b.Before(persistence.MinDue) || b.After(persistence.MaxDue) {
			return nil, fmt.Errorf("%w: bound %s is out of range %s..%s", persistence.ErrInvalidTimeout,
				b.UTC().Format(time.RFC3339Nano), persistence.MinDue.Format(time.RFC3339), persistence.MaxDue.Format(time.RFC3339))
		}
		sorted = append(sorted, RoundUpMicro(b))
	}
	slices.SortFunc(sorted, time.Time.Compare)
	return slices.CompactFunc(sorted, time.Time.Equal), nil
}

// CountsOf returns counts, which are sorted's, in the order of bounds (as SortBounds had them).
func CountsOf(bounds, sorted []time.Time, counts []int) []int {
	out := make([]int, len(bounds))
	for i, b := range bounds {
		j, _ := slices.BinarySearchFunc(sorted, RoundUpMicro(b), time.Time.Compare)
		out[i] = counts[j]
	}
	return out
}
