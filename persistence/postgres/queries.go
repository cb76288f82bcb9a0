package postgres

import "fmt"

// queries holds the store's SQL, made once with the schema and table names quoted.
type queries struct {
	// Quoted, qualified names, which to_regclass reads as SQL would; schemaName is unquoted.
	table, availableIndex, ownerIndex string
	schemaName                        string

	createSchema          string
	createTable           string
	createAvailableIndex  string
	createOwnerIndex      string
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
}

// newQueries builds the SQL for names that passed validateIdentifier.
//
// available_at is when a row can next be claimed: its due time until it is claimed, then the end
// of the claim's lease. Claims and Next use its index, and no watermark is kept, so a timeout
// committed late is still found (NServiceBus#3500).
func newQueries(schema, table string) queries {
	s := quoteIdent(schema)
	t := s + "." + quoteIdent(table)
	availableIndex := quoteIdent(indexName(table, "available_at"))
	ownerIndex := quoteIdent(indexName(table, "owner"))
	return queries{
		table:          t,
		availableIndex: s + "." + availableIndex,
		ownerIndex:     s + "." + ownerIndex,
		schemaName:     schema,
		handover:       newHandoverQueries(t),

		createSchema: fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %s`, s),
		// COLLATE "C": ids and owners compare byte for byte, whatever the database's locale.
		createTable: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id text COLLATE "C" NOT NULL PRIMARY KEY,
	destination text NOT NULL,
	due timestamptz NOT NULL,
	available_at timestamptz NOT NULL,
	owner text COLLATE "C" NOT NULL DEFAULT '',
	payload bytea NOT NULL,
	metadata bytea NOT NULL,
	failure_count integer NOT NULL DEFAULT 0
)`, t),
		createAvailableIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (available_at)`, availableIndex, t),
		// Only equality is asked of owners, and most rows have none: a partial hash index has no
		// length limit (a btree entry must fit in a third of a page) and stays small.
		createOwnerIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING hash (owner) WHERE owner <> ''`, ownerIndex, t),

		store: fmt.Sprintf(`INSERT INTO %s (id, destination, due, available_at, owner, payload, metadata, failure_count)
VALUES ($1, $2, $3, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`, t),
		next: fmt.Sprintf(`SELECT min(available_at) FROM %s`, t),
		// One statement: lock the earliest claimable rows, skipping rows another claim holds, and
		// move them to the end of the lease. The locked rows are updated by their ctid (a TID scan)
		// rather than looked up again by id: a row we hold locked cannot move, and this saves a
		// descent of the primary key per row, which at a million rows is a page read per row. A row
		// updated by someone else after the statement's snapshot is not updated here and stays
		// unclaimed, never claimed twice. The transaction of the claim commits without waiting for
		// its WAL to be flushed (synchronous_commit = off, set for this transaction only): see
		// ClaimDue.
		claim: fmt.Sprintf(`UPDATE %[1]s AS t SET available_at = $3
WHERE t.ctid = ANY (ARRAY(
	SELECT ctid FROM %[1]s WHERE available_at <= $1 ORDER BY available_at LIMIT $2 FOR UPDATE SKIP LOCKED
))
AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
RETURNING t.id, t.due`, t),
		peek:                  fmt.Sprintf(`SELECT destination, due, owner, payload, metadata, failure_count FROM %s WHERE id = $1`, t),
		delete:                fmt.Sprintf(`DELETE FROM %s WHERE id = $1`, t),
		incrementFailureCount: fmt.Sprintf(`UPDATE %s SET failure_count = failure_count + 1 WHERE id = $1`, t),
		// owner <> '' matches the partial index, and keeps "" from meaning "every ownerless timeout".
		cancelByOwner: fmt.Sprintf(`DELETE FROM %s WHERE owner = $1 AND owner <> ''`, t),
		stats:         fmt.Sprintf(`SELECT count(*), min(due), max(due) FROM %s`, t),
		list: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
ORDER BY due, id LIMIT $1`, t),
		listByOwner: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
WHERE owner = $1 AND owner <> '' ORDER BY due, id LIMIT $2`, t),
	}
}
