package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

var _ persistence.Handover = (*Store)(nil)

// handoverQueries is the SQL of persistence.Handover.
type handoverQueries struct {
	survey, hide, release string
}

// newHandoverQueries builds the SQL for the quoted, qualified table name t.
func newHandoverQueries(t string) handoverQueries {
	return handoverQueries{
		survey: fmt.Sprintf(`SELECT destination, count(*), max(due), count(*) FILTER (WHERE available_at >= $1 AND available_at <> due)
FROM %s WHERE due >= $2 GROUP BY destination`, t),
		// available_at >= $2 bounds the index scan: every row due at or after from is claimable
		// at or after from, and a hidden row after HiddenFrom. Rows a poller holds (leased past
		// now, not hidden) are skipped, and rows another Hide is taking are skipped as a claim
		// skips them.
		hide: fmt.Sprintf(`WITH hidden AS (
	SELECT id FROM %[1]s WHERE available_at >= $2
		AND (due >= $2 AND (available_at = due OR available_at <= $3) OR available_at >= $4 AND available_at <> $1)
	ORDER BY available_at LIMIT $5 FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s AS t SET available_at = $1 FROM hidden WHERE t.id = hidden.id
RETURNING t.id, t.destination, t.due, t.owner, t.payload, t.metadata, t.failure_count`, t),
		release: fmt.Sprintf(`UPDATE %s SET available_at = due WHERE id = ANY($1)`, t),
	}
}

// Survey describes the timeouts due at or after from.
func (s *Store) Survey(ctx context.Context, from time.Time) (persistence.Survey, error) {
	rows, err := s.db.QueryContext(ctx, s.q.handover.survey, persistence.HiddenFrom, dueMicros(from))
	if err != nil {
		return persistence.Survey{}, fmt.Errorf("postgres: survey: %w", err)
	}
	defer rows.Close()
	sv := persistence.Survey{Destinations: map[string]int{}}
	for rows.Next() {
		var (
			destination   string
			count, hidden int
			latest        time.Time
		)
		if err := rows.Scan(&destination, &count, &latest, &hidden); err != nil {
			return persistence.Survey{}, fmt.Errorf("postgres: survey: %w", err)
		}
		sv.Destinations[destination] = count
		sv.Count += count
		sv.Hidden += hidden
		if latest.After(sv.Latest) {
			sv.Latest = latest.UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return persistence.Survey{}, fmt.Errorf("postgres: survey: %w", err)
	}
	return sv, nil
}

// Hide claims until mark up to limit timeouts due at or after from that no poller holds at now,
// in one statement.
func (s *Store) Hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]persistence.Timeout, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, s.q.handover.hide,
		mark.UTC(), dueMicros(from), now.UTC().Truncate(time.Microsecond), persistence.HiddenFrom, int64(limit))
	if err != nil {
		return nil, fmt.Errorf("postgres: hide: %w", err)
	}
	defer rows.Close()
	hidden := make([]persistence.Timeout, 0, limit)
	for rows.Next() {
		var (
			t        persistence.Timeout
			metadata []byte
		)
		if err := rows.Scan(&t.ID, &t.Destination, &t.Due, &t.Owner, &t.Payload, &metadata, &t.FailureCount); err != nil {
			return nil, fmt.Errorf("postgres: hide: %w", err)
		}
		t.Due = t.Due.UTC()
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("postgres: hide: timeout %q: %w", t.ID, err)
		}
		hidden = append(hidden, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: hide: %w", err)
	}
	slices.SortFunc(hidden, func(a, b persistence.Timeout) int {
		return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.ID, b.ID))
	})
	return hidden, nil
}

// Release makes the timeouts with these ids claimable again from their due time.
func (s *Store) Release(ctx context.Context, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := rowsAffected(s.db.ExecContext(ctx, s.q.handover.release, ids))
	if err != nil {
		return 0, fmt.Errorf("postgres: release: %w", err)
	}
	return int(n), nil
}
