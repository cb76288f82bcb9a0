package sqlstore

import (
	"fmt"
	"strconv"
	"strings"
)

// Columns lists the columns of a timeout row as Store inserts them, in the tables of the
// backends that name them alike (PostgreSQL, MariaDB, SQLite).
const Columns = "id, destination, due, available_at, owner, payload, metadata, failure_count"

// Standard returns the statements that read and change the table t (quoted) alike in PostgreSQL,
// MariaDB and SQLite; a backend adds Claim and Hide, and what it needs to Store. With dollar, the
// parameters are numbered, $1, $2, … (see Dialect.Numbered), and a statement's ids are one array,
// = ANY($1) (PostgreSQL); otherwise they are ? and a list, IN (?, ?, …).
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
func Standard(t string, dollar bool) Queries {
	// ps returns the placeholders of a statement's k parameters.
	ps := func(k int) []any {
		out := make([]any, k)
		for i := range out {
			out[i] = "?"
			if dollar {
				out[i] = "$" + strconv.Itoa(i+1)
			}
		}
		return out
	}
	in := func(int) string { return "= ANY($1)" }
	if !dollar {
		in = func(n int) string { return "IN (" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")" }
	}
	one := ps(1)[0]
	store := ps(8)
	schedule, reschedule, now, park, held := ps(9), ps(4), ps(2), ps(3), ps(2)
	if dollar { // due is bound once, as due and as available_at
		store = append(ps(3), ps(7)[2:]...)
		schedule = append(ps(3), ps(8)[2:]...)
		reschedule = []any{"$1", "$1", "$2", "$3"}
		now = []any{"$1", "$1"}
	}
	const read = "destination, due, owner, payload, metadata, failure_count, COALESCE(dedup_key, ''), COALESCE(parked_reason, '')"
	return Queries{
		Store: fmt.Sprintf(`INSERT INTO %s (%s)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)`, append([]any{t, Columns}, store...)...),
		Next:                  fmt.Sprintf(`SELECT MIN(available_at) FROM %s`, t),
		Peek:                  fmt.Sprintf(`SELECT %s FROM %s WHERE id = %s`, read, t, one),
		Delete:                fmt.Sprintf(`DELETE FROM %s WHERE id = %s`, t, one),
		IncrementFailureCount: fmt.Sprintf(`UPDATE %s SET failure_count = failure_count + 1 WHERE id = %s`, t, one),
		CancelByOwner:         fmt.Sprintf(`DELETE FROM %s WHERE owner = %s AND owner <> ''`, t, one),
		// A row is claimed at now while its available_at is neither its due time nor past.
		Stats: fmt.Sprintf(`SELECT COUNT(*), SUM(CASE WHEN due <= %[2]s AND parked_reason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN available_at <> due AND available_at > %[3]s AND parked_reason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN parked_reason IS NOT NULL THEN 1 ELSE 0 END), MIN(due), MAX(due)
FROM %[1]s`, t, now[0], now[1]),
		StatsByDestination: fmt.Sprintf(`SELECT destination, COUNT(*) FROM %s GROUP BY destination`, t),
		List: ListSQL{
			From: fmt.Sprintf(`id, destination, due, owner, metadata, failure_count, COALESCE(dedup_key, ''), COALESCE(parked_reason, '') FROM %s`, t),
			ID:   "id", Due: "due", Owner: "owner", Destination: "destination", Key: "dedup_key", Parked: "parked_reason",
		},
		Exists:    fmt.Sprintf(`SELECT 1 FROM %s WHERE id = %s`, t, one),
		KeyHolder: fmt.Sprintf(`SELECT id, due, available_at FROM %s WHERE dedup_key = %s`, t, one),
		DropKey:   fmt.Sprintf(`UPDATE %s SET dedup_key = NULL WHERE id = %s`, t, one),
		Schedule: fmt.Sprintf(`INSERT INTO %s (%s, dedup_key)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)`, append([]any{t, Columns}, schedule...)...),
		Reschedule: fmt.Sprintf(`UPDATE %s SET due = %s, available_at = %s
WHERE id = %s AND (available_at = due OR available_at <= %s) AND parked_reason IS NULL`,
			append([]any{t}, reschedule...)...),
		Survey: fmt.Sprintf(`SELECT destination, COUNT(*), MAX(due), SUM(CASE WHEN available_at >= %s AND available_at <> due THEN 1 ELSE 0 END)
FROM %s WHERE due >= %s AND parked_reason IS NULL`+" GROUP BY destination", ps(2)[0], t, ps(2)[1]),
		Park: fmt.Sprintf(`UPDATE %s SET available_at = %s, parked_reason = %s, claimed_by = NULL, dedup_key = NULL WHERE id = %s`,
			append([]any{t}, park...)...),
		ReleaseClaimsOf: fmt.Sprintf(`UPDATE %s SET available_at = due, claimed_by = NULL
WHERE claimed_by = %s AND available_at <> due AND available_at < %s AND parked_reason IS NULL`, t, held[0], held[1]),
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
