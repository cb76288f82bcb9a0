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

// newHandoverQueries builds the SQL for the quoted, qualified names of the timeouts table t, the
// schedule sc and the leases l (see queries). A hidden timeout is one leased until a mark at or
// after persistence.HiddenFrom.
func newHandoverQueries(t, sc, l string) handoverQueries {
	return handoverQueries{
		survey: fmt.Sprintf(`SELECT t.destination, count(*), max(t.due), count(*) FILTER (WHERE l.lease_until >= $1)
FROM %s AS t LEFT JOIN %s AS l ON l.id = t.id WHERE t.due >= $2 GROUP BY t.destination`, t, l),
		// As a claim: the candidates are schedule rows due at or after from, leases due at or
		// after from that ran out by now, and leases of another mark (a caller that stopped),
		// each locked with FOR UPDATE SKIP LOCKED; the limit that became claimable first are
		// leased until mark, and their bodies returned.
		hide: fmt.Sprintf(`WITH unclaimed AS (
	SELECT ctid AS rid, due AS at FROM %[2]s WHERE due >= $2 ORDER BY due LIMIT $5 FOR UPDATE SKIP LOCKED
), released AS (
	SELECT id, lease_until AS at FROM %[3]s
	WHERE due >= $2 AND lease_until <= $3 OR lease_until >= $4 AND lease_until <> $1
	ORDER BY lease_until LIMIT $5 FOR UPDATE SKIP LOCKED
), picked AS (
	SELECT id, NULL::tid AS rid, at FROM released
	UNION ALL SELECT NULL, rid, at FROM unclaimed
	ORDER BY at LIMIT $5
), moved AS (
	DELETE FROM %[2]s WHERE ctid = ANY (ARRAY(SELECT rid FROM picked WHERE rid IS NOT NULL)) RETURNING id, due
), leased AS (
	INSERT INTO %[3]s (id, due, lease_until) SELECT id, due, $1 FROM moved
	ON CONFLICT (id) DO UPDATE SET due = excluded.due, lease_until = excluded.lease_until
), renewed AS (
	UPDATE %[3]s SET lease_until = $1 WHERE id = ANY (ARRAY(SELECT id FROM picked WHERE rid IS NULL)) RETURNING id
)
SELECT id, destination, due, owner, payload, metadata, failure_count FROM %[1]s
WHERE id = ANY (ARRAY(SELECT id FROM moved UNION ALL SELECT id FROM renewed))`, t, sc, l),
		// Only leases whose timeout is still stored go back to the schedule.
		release: fmt.Sprintf(`WITH released AS (
	DELETE FROM %[3]s WHERE id = ANY ($1) RETURNING id, due
), scheduled AS (
	INSERT INTO %[2]s (due, id) SELECT due, id FROM released WHERE EXISTS (SELECT 1 FROM %[1]s AS t WHERE t.id = released.id)
)
SELECT count(*) FROM released`, t, sc, l),
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
	var n int
	if err := s.db.QueryRowContext(ctx, s.q.handover.release, ids).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: release: %w", err)
	}
	return n, nil
}
