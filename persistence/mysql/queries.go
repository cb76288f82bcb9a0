package mysql

import (
	"fmt"
	"strings"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// queries holds the store's SQL, made once with the table name quoted.
type queries struct {
	createTable string
	tableExists string
	// claimSelect and hideSelect lock the rows a claim or a Hide then moves by id.
	claimSelect, hideSelect string
	table                   string
	core                    sqlstore.Queries
}

// newQueries builds the SQL for a table whose name passed validateTable. Index names are the
// table's own in MariaDB, so they need no prefix.
func newQueries(table string) queries {
	t := quoteIdent(table)
	return queries{
		table: t,
		// A plain INSERT whose duplicate-key error means "stored already": INSERT IGNORE would
		// hide other errors too, and ON DUPLICATE KEY UPDATE's affected-rows count depends on the
		// DSN's clientFoundRows.
		core: sqlstore.Standard(t, false),
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
		// FORCE INDEX: read the index in order and stop at limit, so that only the rows claimed
		// are locked; a table scan and sort would lock every due row and starve other pollers.
		claimSelect: fmt.Sprintf(`SELECT id, due FROM %s FORCE INDEX (available_at)
WHERE available_at <= ? ORDER BY available_at LIMIT ? FOR UPDATE SKIP LOCKED`, t),
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

// placeholders returns "?, ?, …, ?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// moveIn moves n rows, claimed or hidden, to a new available_at.
func (q queries) moveIn(n int) string {
	return fmt.Sprintf(`UPDATE %s SET available_at = ? WHERE id IN (%s)`, q.table, placeholders(n))
}

// storeMany inserts n rows: Store's statement with n value lists.
func (q queries) storeMany(n int) string {
	return fmt.Sprintf(`INSERT INTO %s (%s)
VALUES %s`, q.table, sqlstore.Columns, strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?), ", n), ", "))
}

// idsIn selects which of n ids are stored.
func (q queries) idsIn(n int) string {
	return fmt.Sprintf(`SELECT id FROM %s WHERE id IN (%s)`, q.table, placeholders(n))
}

// deleteIn deletes the timeouts with n ids.
func (q queries) deleteIn(n int) string {
	return fmt.Sprintf(`DELETE FROM %s WHERE id IN (%s)`, q.table, placeholders(n))
}
