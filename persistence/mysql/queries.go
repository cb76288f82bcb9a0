package mysql

import (
	"fmt"
	"strings"
)

// queries holds the store's SQL, made once with the table name quoted.
type queries struct {
	createTable           string
	tableExists           string
	store                 string
	next                  string
	claimSelect           string
	peek                  string
	delete                string
	incrementFailureCount string
	cancelByOwner         string
	stats                 string
	list                  string
	listByOwner           string
	table                 string
	handover              handoverQueries
}

// newQueries builds the SQL for a table whose name passed validateTable.
//
// available_at is when a row can next be claimed: its due time until it is claimed, then the end
// of the claim's lease. Claims and Next use its index, and no watermark is kept, so a timeout
// committed late is still found (NServiceBus#3500). Index names are the table's own in MariaDB,
// so they need no prefix.
func newQueries(table string) queries {
	t := quoteIdent(table)
	return queries{
		table:    t,
		handover: newHandoverQueries(t),
		// Binary strings: ids and owners compare byte for byte ("a", "A" and "a " are three
		// ids), and any bytes fit, whatever the server's character sets.
		createTable: fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
			"\tid VARBINARY(250) NOT NULL,\n"+
			"\tdestination BLOB NOT NULL,\n"+
			"\tdue DATETIME(6) NOT NULL,\n"+
			"\tavailable_at DATETIME(6) NOT NULL,\n"+
			"\towner BLOB NOT NULL,\n"+
			"\tpayload LONGBLOB NOT NULL,\n"+
			"\tmetadata MEDIUMBLOB NOT NULL,\n"+
			"\tfailure_count INT NOT NULL DEFAULT 0,\n"+
			"\tPRIMARY KEY (id),\n"+
			"\tINDEX available_at (available_at),\n"+
			"\tINDEX owner (owner(255))\n"+
			") ENGINE=InnoDB", t),
		// Fails with ER_NO_SUCH_TABLE when missing. Exact, unlike information_schema, whose names
		// compare case-insensitively.
		tableExists: fmt.Sprintf(`SELECT 1 FROM %s LIMIT 0`, t),
		store: fmt.Sprintf(`INSERT INTO %s (id, destination, due, available_at, owner, payload, metadata, failure_count)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, t),
		next: fmt.Sprintf(`SELECT MIN(available_at) FROM %s`, t),
		// FORCE INDEX: read the index in order and stop at limit, so that only the rows claimed
		// are locked; a table scan and sort would lock every due row and starve other pollers.
		claimSelect: fmt.Sprintf(`SELECT id, due FROM %s FORCE INDEX (available_at)
WHERE available_at <= ? ORDER BY available_at LIMIT ? FOR UPDATE SKIP LOCKED`, t),
		peek:                  fmt.Sprintf(`SELECT destination, due, owner, payload, metadata, failure_count FROM %s WHERE id = ?`, t),
		delete:                fmt.Sprintf(`DELETE FROM %s WHERE id = ?`, t),
		incrementFailureCount: fmt.Sprintf(`UPDATE %s SET failure_count = failure_count + 1 WHERE id = ?`, t),
		// owner <> '' keeps "" from meaning "every ownerless timeout".
		cancelByOwner: fmt.Sprintf(`DELETE FROM %s WHERE owner = ? AND owner <> ''`, t),
		stats:         fmt.Sprintf(`SELECT COUNT(*), MIN(due), MAX(due) FROM %s`, t),
		list: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
ORDER BY due, id LIMIT ?`, t),
		listByOwner: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
WHERE owner = ? AND owner <> '' ORDER BY due, id LIMIT ?`, t),
	}
}

// claimUpdate moves n claimed rows to the end of their lease.
func (q queries) claimUpdate(n int) string {
	return fmt.Sprintf(`UPDATE %s SET available_at = ? WHERE id IN (%s)`, q.table, placeholders(n))
}

// placeholders returns "?, ?, …, ?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// storeMany inserts n rows: store with n value lists.
func (q queries) storeMany(n int) string {
	return fmt.Sprintf(`INSERT INTO %s (id, destination, due, available_at, owner, payload, metadata, failure_count)
VALUES %s`, q.table, strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?), ", n), ", "))
}

// idsIn selects which of n ids are stored.
func (q queries) idsIn(n int) string {
	return fmt.Sprintf(`SELECT id FROM %s WHERE id IN (%s)`, q.table, placeholders(n))
}

// peekIn reads the timeouts with n ids.
func (q queries) peekIn(n int) string {
	return fmt.Sprintf(`SELECT id, destination, due, owner, payload, metadata, failure_count FROM %s WHERE id IN (%s)`,
		q.table, placeholders(n))
}

// deleteIn deletes the timeouts with n ids.
func (q queries) deleteIn(n int) string {
	return fmt.Sprintf(`DELETE FROM %s WHERE id IN (%s)`, q.table, placeholders(n))
}
