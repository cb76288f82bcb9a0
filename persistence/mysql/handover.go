package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

var _ persistence.Handover = (*Store)(nil)

// releaseChunk bounds the ids of one Release statement.
const releaseChunk = 500

// handoverQueries is the SQL of persistence.Handover.
type handoverQueries struct {
	survey, hideSelect string
	table              string
}

// newHandoverQueries builds the SQL for the quoted table name t.
func newHandoverQueries(t string) handoverQueries {
	return handoverQueries{
		table: t,
		survey: fmt.Sprintf(`SELECT destination, COUNT(*), MAX(due), SUM(available_at >= ? AND available_at <> due)
FROM %s WHERE due >= ? GROUP BY destination`, t),
		// available_at >= ? bounds the index scan: every row due at or after from is claimable
		// at or after from, and a hidden row after HiddenFrom. Rows a poller holds (leased past
		// now, not hidden) are skipped, and rows another Hide is taking are skipped as a claim
		// skips them.
		hideSelect: fmt.Sprintf(`SELECT id, destination, due, owner, payload, metadata, failure_count
FROM %s FORCE INDEX (available_at)
WHERE available_at >= ? AND (due >= ? AND (available_at = due OR available_at <= ?) OR available_at >= ? AND available_at <> ?)
ORDER BY available_at LIMIT ? FOR UPDATE SKIP LOCKED`, t),
	}
}

// inList is the SQL of n placeholders for IN (...).
func inList(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// Survey describes the timeouts due at or after from.
func (s *Store) Survey(ctx context.Context, from time.Time) (persistence.Survey, error) {
	rows, err := s.db.QueryContext(ctx, s.q.handover.survey, formatTime(persistence.HiddenFrom), formatTime(roundUpMicro(from)))
	if err != nil {
		return persistence.Survey{}, fmt.Errorf("mysql: survey: %w", err)
	}
	defer rows.Close()
	sv := persistence.Survey{Destinations: map[string]int{}}
	for rows.Next() {
		var (
			destination   string
			count, hidden int
			latest        utcTime
		)
		if err := rows.Scan(&destination, &count, &latest, &hidden); err != nil {
			return persistence.Survey{}, fmt.Errorf("mysql: survey: %w", err)
		}
		sv.Destinations[destination] = count
		sv.Count += count
		sv.Hidden += hidden
		if latest.Time.After(sv.Latest) {
			sv.Latest = latest.Time
		}
	}
	if err := rows.Err(); err != nil {
		return persistence.Survey{}, fmt.Errorf("mysql: survey: %w", err)
	}
	return sv, nil
}

// Hide claims until mark up to limit timeouts due at or after from that no poller holds at now.
func (s *Store) Hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]persistence.Timeout, error) {
	if limit <= 0 {
		return nil, nil
	}
	var (
		hidden []persistence.Timeout
		err    error
	)
	for attempt := 1; ; attempt++ {
		hidden, err = s.hide(ctx, now, from, limit, mark)
		if err == nil || !isServerError(err, errLockDeadlock) || attempt == claimAttempts {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: hide: %w", err)
	}
	slices.SortFunc(hidden, func(a, b persistence.Timeout) int {
		return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.ID, b.ID))
	})
	return hidden, nil
}

// hide locks the rows, skipping rows others hold, and moves their claim to mark, in one READ
// COMMITTED transaction, as a claim does.
func (s *Store) hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) (hidden []persistence.Timeout, err error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	markText, fromText := formatTime(mark), formatTime(roundUpMicro(from))
	rows, err := tx.QueryContext(ctx, s.q.handover.hideSelect,
		fromText, fromText, formatTime(now.UTC().Truncate(time.Microsecond)), formatTime(persistence.HiddenFrom), markText, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	args := []any{markText}
	for rows.Next() {
		var (
			t        persistence.Timeout
			due      utcTime
			metadata []byte
		)
		if err := rows.Scan(&t.ID, &t.Destination, &due, &t.Owner, &t.Payload, &metadata, &t.FailureCount); err != nil {
			return nil, err
		}
		t.Due = due.Time
		if t.Metadata, err = persistence.DecodeMetadata(metadata); err != nil {
			return nil, fmt.Errorf("timeout %q: %w", t.ID, err)
		}
		hidden = append(hidden, t)
		args = append(args, []byte(t.ID))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if len(hidden) > 0 {
		update := fmt.Sprintf(`UPDATE %s SET available_at = ? WHERE id IN (%s)`, s.q.handover.table, inList(len(hidden)))
		if _, err := tx.ExecContext(ctx, update, args...); err != nil {
			return nil, err
		}
	}
	return hidden, tx.Commit()
}

// Release makes the timeouts with these ids claimable again from their due time.
func (s *Store) Release(ctx context.Context, ids []string) (int, error) {
	total := 0
	for chunk := range slices.Chunk(ids, releaseChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = []byte(id)
		}
		query := fmt.Sprintf(`UPDATE %s SET available_at = due WHERE id IN (%s)`, s.q.handover.table, inList(len(chunk)))
		n, err := rowsAffected(s.db.ExecContext(ctx, query, args...))
		if err != nil {
			return total, fmt.Errorf("mysql: release: %w", err)
		}
		total += int(n)
	}
	return total, nil
}
