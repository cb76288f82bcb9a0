package sqlstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Survey describes the timeouts due at or after from.
func (s *Store) Survey(ctx context.Context, from time.Time) (persistence.Survey, error) {
	if err := Opened(s); err != nil {
		return persistence.Survey{}, err
	}
	d := &s.d
	rows, err := d.Run.Reader.QueryContext(ctx, s.st.Survey.SQL, s.st.Survey.Args(SurveyParams{From: RoundUpMicro(from)})...)
	if err != nil {
		return persistence.Survey{}, fmt.Errorf("%s: survey: %w", d.Name, err)
	}
	defer rows.Close()
	sv := persistence.Survey{Destinations: map[string]int{}}
	latest := s.timeValue()
	for rows.Next() {
		var (
			destination   string
			count, hidden int
		)
		if err := rows.Scan(&destination, &count, latest, &hidden); err != nil {
			return persistence.Survey{}, fmt.Errorf("%s: survey: %w", d.Name, err)
		}
		sv.Destinations[destination] = count
		sv.Count += count
		sv.Hidden += hidden
		if latest.t.After(sv.Latest) {
			sv.Latest = latest.t
		}
	}
	if err := rows.Err(); err != nil {
		return persistence.Survey{}, fmt.Errorf("%s: survey: %w", d.Name, err)
	}
	return sv, nil
}

// Hide claims until mark up to limit timeouts due at or after from that no poller holds at now,
// and returns them earliest due first.
func (s *Store) Hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]persistence.Timeout, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	var (
		hidden []persistence.Timeout
		err    error
	)
	p := HideParams{Now: now.UTC().Truncate(time.Microsecond), From: RoundUpMicro(from), Mark: mark.UTC(), Limit: limit}
	if s.d.Own.Hide != nil {
		hidden, err = s.d.Own.Hide(ctx, p)
	} else {
		err = s.write(ctx, false, func(ctx context.Context, q Querier) error {
			hidden, err = s.hide(ctx, q, p)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("%s: hide: %w", s.d.Name, err)
	}
	slices.SortFunc(hidden, func(a, b persistence.Timeout) int {
		return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.ID, b.ID))
	})
	return hidden, nil
}

func (s *Store) hide(ctx context.Context, q Querier, p HideParams) ([]persistence.Timeout, error) {
	rows, err := q.QueryContext(ctx, s.st.Hide.SQL, s.st.Hide.Args(p)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	hidden := make([]persistence.Timeout, 0, min(p.Limit, 1000))
	for rows.Next() {
		t, err := ScanTimeout(s, rows)
		if err != nil {
			return nil, err
		}
		hidden = append(hidden, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return hidden, rows.Close()
}

// Release makes the timeouts with these ids claimable again from their due time, one statement
// per MaxIn ids, and returns how many it found.
func (s *Store) Release(ctx context.Context, ids []string) (int, error) {
	if err := Opened(s); err != nil {
		return 0, err
	}
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("%s: release: %w", s.d.Name, err)
		}
	}
	ids = s.keys(ids)
	total := 0
	for chunk := range slices.Chunk(ids, s.maxIn(len(ids))) {
		query, args := s.d.Bind.in(s.d.SQL.ReleaseIn, chunk)
		n, err := s.writeCount(ctx, query, args)
		if err != nil {
			return total, fmt.Errorf("%s: release: %w", s.d.Name, err)
		}
		total += int(n)
	}
	return total, nil
}
