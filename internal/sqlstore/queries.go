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
	if dollar { // due is bound once, as due and as available_at
		store = append(ps(3), ps(7)[2:]...)
	}
	return Queries{
		Store: fmt.Sprintf(`INSERT INTO %s (%s)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)`, append([]any{t, Columns}, store...)...),
		Next:                  fmt.Sprintf(`SELECT MIN(available_at) FROM %s`, t),
		Peek:                  fmt.Sprintf(`SELECT destination, due, owner, payload, metadata, failure_count FROM %s WHERE id = %s`, t, one),
		Delete:                fmt.Sprintf(`DELETE FROM %s WHERE id = %s`, t, one),
		IncrementFailureCount: fmt.Sprintf(`UPDATE %s SET failure_count = failure_count + 1 WHERE id = %s`, t, one),
		CancelByOwner:         fmt.Sprintf(`DELETE FROM %s WHERE owner = %s AND owner <> ''`, t, one),
		Stats:                 fmt.Sprintf(`SELECT COUNT(*), MIN(due), MAX(due) FROM %s`, t),
		List: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
ORDER BY due, id LIMIT %s`, t, one),
		ListByOwner: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
WHERE owner = %s AND owner <> '' ORDER BY due, id LIMIT %s`, append([]any{t}, ps(2)...)...),
		Survey: fmt.Sprintf(`SELECT destination, COUNT(*), MAX(due), SUM(CASE WHEN available_at >= %s AND available_at <> due THEN 1 ELSE 0 END)
FROM %s WHERE due >= %s`+" GROUP BY destination", ps(2)[0], t, ps(2)[1]),
		PeekIn: func(n int) string {
			return fmt.Sprintf(`SELECT id, destination, due, owner, payload, metadata, failure_count FROM %s WHERE id %s`, t, in(n))
		},
		RemoveIn:  func(n int) string { return fmt.Sprintf(`DELETE FROM %s WHERE id %s RETURNING id`, t, in(n)) },
		ReleaseIn: func(n int) string { return fmt.Sprintf(`UPDATE %s SET available_at = due WHERE id %s`, t, in(n)) },
	}
}
