package sqlite

import "fmt"

// queries holds the store's SQL, made once with the table name quoted.
type queries struct {
	setup                 []string
	store                 string
	next                  string
	claim                 string
	peek                  string
	delete                string
	incrementFailureCount string
	cancelByOwner         string
	stats                 string
	list                  string
	listByOwner           string
	handover              handoverQueries

	// peekIn and deleteIn are completed with "?, ?, …)" for as many ids as a batch has.
	peekIn, deleteIn string
}

// newQueries builds the SQL for a table whose name passed validateTable.
//
// available_at is when a row can next be claimed: its due time until it is claimed, then the end
// of the claim's lease. Claims, Next and the lease all use its index, and no watermark is kept,
// so a timeout committed late is still found (NServiceBus#3500).
func newQueries(table string) queries {
	t := quoteIdent(table)
	availableIndex := quoteIdent(table + "_available_at")
	ownerIndex := quoteIdent(table + "_owner")
	return queries{
		handover: newHandoverQueries(t),
		setup: []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id TEXT NOT NULL PRIMARY KEY,
	destination TEXT NOT NULL,
	due INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	owner TEXT NOT NULL DEFAULT '',
	payload BLOB NOT NULL,
	metadata BLOB NOT NULL,
	failure_count INTEGER NOT NULL DEFAULT 0
)`, t),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (available_at)`, availableIndex, t),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (owner) WHERE owner <> ''`, ownerIndex, t),
		},
		store: fmt.Sprintf(`INSERT INTO %s (id, destination, due, available_at, owner, payload, metadata, failure_count)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`, t),
		next: fmt.Sprintf(`SELECT MIN(available_at) FROM %s`, t),
		claim: fmt.Sprintf(`UPDATE %[1]s SET available_at = ?
WHERE id IN (SELECT id FROM %[1]s WHERE available_at <= ? ORDER BY available_at LIMIT ?)
RETURNING id, due`, t),
		peek:                  fmt.Sprintf(`SELECT destination, due, owner, payload, metadata, failure_count FROM %s WHERE id = ?`, t),
		delete:                fmt.Sprintf(`DELETE FROM %s WHERE id = ?`, t),
		peekIn:                fmt.Sprintf(`SELECT id, destination, due, owner, payload, metadata, failure_count FROM %s WHERE id IN (`, t),
		deleteIn:              fmt.Sprintf(`DELETE FROM %s WHERE id IN (`, t),
		incrementFailureCount: fmt.Sprintf(`UPDATE %s SET failure_count = failure_count + 1 WHERE id = ?`, t),
		// owner <> '' lets SQLite use the partial index, and keeps "" from meaning "no owner".
		cancelByOwner: fmt.Sprintf(`DELETE FROM %s WHERE owner = ? AND owner <> ''`, t),
		stats:         fmt.Sprintf(`SELECT COUNT(*), MIN(due), MAX(due) FROM %s`, t),
		list: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
ORDER BY due, id LIMIT ?`, t),
		listByOwner: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
WHERE owner = ? AND owner <> '' ORDER BY due, id LIMIT ?`, t),
	}
}
