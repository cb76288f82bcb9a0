package sqlite

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

// releaseChunk bounds the ids of one Release statement, well under SQLite's variable limit.
const releaseChunk = 500

// handoverQueries is the SQL of persistence.Handover.
type handoverQueries struct {
	survey, hide, release string
}

// newHandoverQueries builds the SQL for the quoted table name t.
func newHandoverQueries(t string) handoverQueries {
	return handoverQueries{
		survey: fmt.Sprintf(`SELECT destination, COUNT(*), MAX(due), SUM(CASE WHEN available_at >= ? AND available_at <> due THEN 1 ELSE 0 END)
FROM %s WHERE due >= ? GROUP BY destination`, t),
		// available_at >= ? bounds the index scan: every row due at or after from is claimable
		// at or after from, and a hidden row after HiddenFrom. Rows a poller holds (leased past
		// now, not hidden) are skipped.
		hide: fmt.Sprintf(`UPDATE %[1]s SET available_at = ?
WHERE id IN (SELECT id FROM %[1]s WHERE available_at >= ?
	AND (due >= ? AND (available_at = due OR available_at <= ?) OR available_at >= ? AND available_at <> ?)
	ORDER BY available_at LIMIT ?)
RETURNING id, destination, due, owner, payload, metadata, failure_count`, t),
		release: `UPDATE ` + t + ` SET available_at = due WHERE id IN (%s)`,
	}
}

// Survey describes the timeouts due at or after from.
func (s *Store) Survey(ctx context.Context, from time.Time) (persistence.Survey, error) {
	rows, err := s.reader.QueryContext(ctx, s.q.handover.survey, persistence.HiddenFrom.UnixMicro(), dueMicros(from))
	if err != nil {
		return persistence.Survey{}, fmt.Errorf("sqlite: survey: %w", err)
	}
	defer rows.Close()
	sv := persistence.Survey{Destinations: map[string]int{}}
	for rows.Next() {
		var (
			destination   string
			count, hidden int
			latest        int64
		)
		if err := rows.Scan(&destination, &count, &latest, &hidden); err != nil {
			return persistence.Survey{}, fmt.Errorf("sqlite: survey: %w", err)
		}
		sv.Destinations[destination] = count
		sv.Count += count
		sv.Hidden += hidden
		if t := fromMicros(latest); t.After(sv.Latest) {
			sv.Latest = t
		}
	}
	if err := rows.Err(); err != nil {
		return persistence.Survey{}, fmt.Errorf("sqlite: survey: %w", err)
	}
	return sv, nil
}

// Hide claims until mark up to limit timeouts due at or after from that no poller holds at now.
func (s *Store) Hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]persistence.Timeout, error) {
	if limit <= 0 {
		return nil, nil
	}
	var hidden []persistence.Timeout
	fromUS, markUS := dueMicros(from), mark.UnixMicro()
	err := s.writer.do(ctx, func(ctx context.Context, db execer) error {
		hidden = hidden[:0]
		rows, err := db.QueryContext(ctx, s.q.handover.hide,
			markUS, fromUS, fromUS, now.UnixMicro(), persistence.HiddenFrom.UnixMicro(), markUS, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			t, err := scanTimeout(rows)
			if err != nil {
				return err
			}
			hidden = append(hidden, t)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return rows.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: hide: %w", err)
	}
	slices.SortFunc(hidden, func(a, b persistence.Timeout) int {
		return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.ID, b.ID))
	})
	return hidden, nil
}

// scanTimeout reads id, destination, due, owner, payload, metadata, failure_count.
func scanTimeout(rows interface{ Scan(...any) error }) (persistence.Timeout, error) {
	var (
		t        persistence.Timeout
		due      int64
		metadata []byte
	)
	if err := rows.Scan(&t.ID, &t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount); err != nil {
		return persistence.Timeout{}, err
	}
	t.Due = fromMicros(due)
	md, err := persistence.DecodeMetadata(metadata)
	if err != nil {
		return persistence.Timeout{}, fmt.Errorf("timeout %q: %w", t.ID, err)
	}
	t.Metadata = md
	return t, nil
}

// Release makes the timeouts with these ids claimable again from their due time.
func (s *Store) Release(ctx context.Context, ids []string) (int, error) {
	total := 0
	for chunk := range slices.Chunk(ids, releaseChunk) {
		query := fmt.Sprintf(s.q.handover.release, strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", "))
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		var n int64
		err := s.writer.do(ctx, func(ctx context.Context, db execer) error {
			var err error
			n, err = rowsAffected(db.ExecContext(ctx, query, args...))
			return err
		})
		if err != nil {
			return total, fmt.Errorf("sqlite: release: %w", err)
		}
		total += int(n)
	}
	return total, nil
}
