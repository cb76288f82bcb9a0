package sqlstore

import (
	"fmt"
	"strings"
)

// Columns lists the columns of a timeout row as Store inserts them, in the tables of the
// backends that name them alike (PostgreSQL, MariaDB, SQLite).
const Columns = "id, destination, due, available_at, owner, payload, metadata, failure_count"

// Standard returns the statements that read and change the table t (quoted) alike in PostgreSQL,
// MariaDB and SQLite; a backend adds Claim and Hide, and what it needs to Store. With Numbered, a
// statement's ids are one array, = ANY($1) (PostgreSQL); otherwise they are a list, IN (?, ?, …).
//
// available_at is when a row can next be claimed: its due time until it is claimed, then the end
// of the claim's lease. Claims and Next use its index, and no watermark is kept, so a timeout
// committed late is still found (NServiceBus#3500). The test that owner is not empty matches the
// partial owner indexes, and keeps "" from meaning "every ownerless timeout".
//
// dedup_key is a timeout's deduplication key, NULL for none, under a unique index: the backend
// makes Schedule's insert skip a taken id or key, and KeyHolder lock the row it finds.
//
// parked_reason is why a timeout was parked, NULL when it is not: a parked row's available_at is
// persistence.MaxDue, which no poller's now reaches, so that the claim and its index stay as they
// are; the statements that take available_at past persistence.HiddenFrom for hidden leave parked
// rows out. claimed_by is the instance of ClaimDueAs that claimed a row last, NULL for none; it
// has no index, since every claim writes it (ReleaseClaimsOf, run once at a manager's start,
// reads the table).
func Standard(t string, style Style) Queries {
	in := func(int) string { return "= ANY($1)" }
	if style != Numbered {
		in = func(n int) string { return "IN (" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")" }
	}
	const read = "destination, due, owner, payload, metadata, failure_count, COALESCE(dedup_key, ''), COALESCE(parked_reason, '')"
	const values = "@id, @destination, @due, @due, @owner, @state, @headers, @failureCount"
	return Queries{
		Store: fmt.Sprintf(`INSERT INTO %s (%s)
VALUES (%s)`, t, Columns, values),
		Next:                  fmt.Sprintf(`SELECT MIN(available_at) FROM %s`, t),
		Peek:                  fmt.Sprintf(`SELECT %s FROM %s WHERE id = @id`, read, t),
		Delete:                fmt.Sprintf(`DELETE FROM %s WHERE id = @id`, t),
		IncrementFailureCount: fmt.Sprintf(`UPDATE %s SET failure_count = failure_count + 1 WHERE id = @id`, t),
		CancelByOwner:         fmt.Sprintf(`DELETE FROM %s WHERE owner = @owner AND owner <> ''`, t),
		// A row is claimed at now while its available_at is neither its due time nor past.
		Stats: fmt.Sprintf(`SELECT COUNT(*), SUM(CASE WHEN due <= @now AND parked_reason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN available_at <> due AND available_at > @now AND parked_reason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN parked_reason IS NOT NULL THEN 1 ELSE 0 END), MIN(due), MAX(due)
FROM %s`, t),
		StatsByDestination: fmt.Sprintf(`SELECT destination, COUNT(*) FROM %s GROUP BY destination`, t),
		List: ListSQL{
			From: fmt.Sprintf(`id, destination, due, owner, metadata, failure_count, COALESCE(dedup_key, ''), COALESCE(parked_reason, '') FROM %s`, t),
			ID:   "id", Due: "due", Owner: "owner", Destination: "destination", Key: "dedup_key", Parked: "parked_reason",
		},
		Exists:    fmt.Sprintf(`SELECT 1 FROM %s WHERE id = @id`, t),
		KeyHolder: fmt.Sprintf(`SELECT id, due, available_at FROM %s WHERE dedup_key = @key`, t),
		DropKey:   fmt.Sprintf(`UPDATE %s SET dedup_key = NULL WHERE id = @id`, t),
		Schedule: fmt.Sprintf(`INSERT INTO %s (%s, dedup_key)
VALUES (%s, @key)`, t, Columns, values),
		Reschedule: fmt.Sprintf(`UPDATE %s SET due = @due, available_at = @due
WHERE id = @id AND (available_at = due OR available_at <= @now) AND parked_reason IS NULL`, t),
		Survey: fmt.Sprintf(`SELECT destination, COUNT(*), MAX(due), SUM(CASE WHEN available_at >= @hiddenFrom AND available_at <> due THEN 1 ELSE 0 END)
FROM %s WHERE due >= @from AND parked_reason IS NULL GROUP BY destination`, t),
		Park: fmt.Sprintf(`UPDATE %s SET available_at = @parkedAt, parked_reason = @reason, claimed_by = NULL, dedup_key = NULL WHERE id = @id`, t),
		ReleaseClaimsOf: fmt.Sprintf(`UPDATE %s SET available_at = due, claimed_by = NULL
WHERE claimed_by = @instance AND available_at <> due AND available_at < @hiddenFrom AND parked_reason IS NULL`, t),
		PeekIn: func(n int) string {
			return fmt.Sprintf(`SELECT id, %s FROM %s WHERE id %s`, read, t, in(n))
		},
		RemoveIn: func(n int) string { return fmt.Sprintf(`DELETE FROM %s WHERE id %s RETURNING id`, t, in(n)) },
		ReleaseIn: func(n int) string {
			return fmt.Sprintf(`UPDATE %s SET available_at = due, claimed_by = NULL WHERE id %s AND parked_reason IS NULL`, t, in(n))
		},
		UnparkIn: func(n int) string {
			return fmt.Sprintf(`UPDATE %s SET available_at = due, failure_count = 0, parked_reason = NULL, claimed_by = NULL
WHERE id %s AND parked_reason IS NOT NULL`, t, in(n))
		},
		DeleteParkedIn: func(n int) string {
			return fmt.Sprintf(`DELETE FROM %s WHERE id %s AND parked_reason IS NOT NULL`, t, in(n))
		},
	}
}
