package postgres

import "fmt"

// queries holds the store's SQL, made once with the schema and table names quoted.
//
// Timeouts live in two tables of the same shape. The table (Config.Table) holds those not
// claimed; a claim moves the rows it takes into the claimed table ("<table>_claimed"), where they
// stay until they are removed or their lease runs out and a claim takes them again. The table can
// hold millions of rows and the claimed table only those in flight, so a claim writes the index
// entries of its rows into the small table's indexes, which stay in memory, instead of into the
// big table's primary key at random pages: at a million pending that halves a claim's time (see
// ClaimDue). A table made by an earlier version, which kept claims in place, is the table as it is:
// SetupInfrastructure only adds the claimed table, and rows that version had claimed are claimed
// again when their lease runs out.
type queries struct {
	// Quoted, qualified names, which to_regclass reads as SQL would; schemaName is unquoted.
	table, availableIndex, ownerIndex                 string
	claimed, claimedAvailableIndex, claimedOwnerIndex string
	schemaName                                        string

	createSchema                string
	createTable                 string
	createAvailableIndex        string
	createOwnerIndex            string
	createClaimed               string
	createClaimedAvailableIndex string
	createClaimedOwnerIndex     string

	store                 string
	storeMany             string
	unclaimDuplicates     string
	next                  string
	claim                 string
	peek                  string
	peekMany              string
	remove                string
	removeMany            string
	incrementFailureCount string
	cancelByOwner         string
	stats                 string
	list                  string
	listByOwner           string
	handover              handoverQueries
}

// columns are the columns of both tables, in the order they were created.
const columns = `id, destination, due, available_at, owner, payload, metadata, failure_count`

// newQueries builds the SQL for names that passed validateIdentifier.
//
// available_at is when a row can next be claimed: its due time until it is claimed, then the end
// of the claim's lease. Claims and Next use its indexes, and no watermark is kept, so a timeout
// committed late is still found (NServiceBus#3500).
func newQueries(schema, table string) queries {
	s := quoteIdent(schema)
	t := s + "." + quoteIdent(table)
	c := s + "." + quoteIdent(indexName(table, "claimed"))
	index := func(suffix string) string { return quoteIdent(indexName(table, suffix)) }
	createTable := func(name, pkey string) string {
		// COLLATE "C": ids and owners compare byte for byte, whatever the database's locale.
		return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id text COLLATE "C" NOT NULL%s PRIMARY KEY,
	destination text NOT NULL,
	due timestamptz NOT NULL,
	available_at timestamptz NOT NULL,
	owner text COLLATE "C" NOT NULL DEFAULT '',
	payload bytea NOT NULL,
	metadata bytea NOT NULL,
	failure_count integer NOT NULL DEFAULT 0
)`, name, pkey)
	}
	// Only equality is asked of owners, and most rows have none: a partial hash index has no
	// length limit (a btree entry must fit in a third of a page) and stays small.
	ownerIndex := func(name, on string) string {
		return fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING hash (owner) WHERE owner <> ''`, name, on)
	}
	// fromBoth selects what from both tables, claimed rows first, with where (in which $n are the
	// statement's parameters) applied to each.
	fromBoth := func(what, where string) string {
		return fmt.Sprintf(`SELECT %[1]s FROM %[2]s WHERE %[4]s UNION ALL SELECT %[1]s FROM %[3]s WHERE %[4]s`, what, c, t, where)
	}
	return queries{
		table:                 t,
		availableIndex:        s + "." + index("available_at"),
		ownerIndex:            s + "." + index("owner"),
		claimed:               c,
		claimedAvailableIndex: s + "." + index("claimed_available_at"),
		claimedOwnerIndex:     s + "." + index("claimed_owner"),
		schemaName:            schema,
		handover:              newHandoverQueries(t, c),

		createSchema:         fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %s`, s),
		createTable:          createTable(t, ""),
		createAvailableIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (available_at)`, index("available_at"), t),
		createOwnerIndex:     ownerIndex(index("owner"), t),
		// The constraint is named as the indexes are: PostgreSQL's own name would be cut, and
		// could then be another table's.
		createClaimed:               createTable(c, " CONSTRAINT "+index("claimed_pkey")),
		createClaimedAvailableIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (available_at)`, index("claimed_available_at"), c),
		createClaimedOwnerIndex:     ownerIndex(index("claimed_owner"), c),

		store: fmt.Sprintf(`INSERT INTO %s (%s) VALUES ($1, $2, $3, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING RETURNING id`, t, columns),
		// Rows are inserted in id order, so that batches holding the same ids in other orders wait
		// for each other instead of deadlocking.
		storeMany: fmt.Sprintf(`INSERT INTO %s (%s)
SELECT id, destination, due, due, owner, payload, metadata, failure_count
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bytea[], $6::bytea[], $7::int[])
	AS t(id, destination, due, owner, payload, metadata, failure_count)
ORDER BY id
ON CONFLICT (id) DO NOTHING RETURNING id`, t, columns),
		// A store's insert checks the primary key of the table only. A timeout a claim moved to
		// the claimed table is stored already, so a store then deletes, in the same transaction
		// and in a statement of its own, whatever row of its ids the table has and the claimed
		// table has too (an id is never in both otherwise): the insert waits for a claim that is
		// moving the id, and only a later statement sees that claim's row (READ COMMITTED).
		unclaimDuplicates: fmt.Sprintf(`DELETE FROM %s WHERE id IN (SELECT id FROM %s WHERE id = ANY($1)) RETURNING id`, t, c),
		next:              fmt.Sprintf(`SELECT least((SELECT min(available_at) FROM %s), (SELECT min(available_at) FROM %s))`, t, c),
		// One statement: lock the earliest claimable rows, skipping rows another claim holds, and
		// claim them until the end of the lease: rows of the claimed table whose lease ran out are
		// claimed again in place, and rows of the table are moved to the claimed table for the
		// rest of the limit. Locked rows are changed by their ctid (a TID scan) rather than looked
		// up again by id: a row we hold locked cannot move, and this saves a descent of the
		// primary key per row, which at a million rows is a page read per row. A row changed by
		// someone else after the statement's snapshot is not changed here and stays unclaimed,
		// never claimed twice. The insert cannot meet an id that is claimed already (a store
		// never leaves one in both tables); if it did, the claimed row is kept. The transaction
		// of the claim commits without waiting for its WAL to be flushed (synchronous_commit =
		// off, set for this transaction only): see ClaimDue.
		claim: fmt.Sprintf(`WITH expired AS (
	UPDATE %[2]s AS t SET available_at = $3
	WHERE t.ctid = ANY (ARRAY(
		SELECT ctid FROM %[2]s WHERE available_at <= $1 ORDER BY available_at LIMIT $2 FOR UPDATE SKIP LOCKED
	))
	RETURNING t.id, t.due
), moved AS (
	DELETE FROM %[1]s AS t
	WHERE t.ctid = ANY (ARRAY(
		SELECT ctid FROM %[1]s WHERE available_at <= $1 ORDER BY available_at
		LIMIT $2 - (SELECT count(*) FROM expired) FOR UPDATE SKIP LOCKED
	))
	AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
	RETURNING t.*
), claimed AS (
	INSERT INTO %[2]s (%[3]s)
	SELECT id, destination, due, $3, owner, payload, metadata, failure_count FROM moved
	ON CONFLICT (id) DO NOTHING
	RETURNING id, due
)
SELECT id, due FROM expired UNION ALL SELECT id, due FROM claimed`, t, c, columns),
		// LIMIT 1 stops at the claimed table, where the dispatcher finds what it peeks, and
		// leaves the big table's primary key alone.
		peek: fromBoth(`destination, due, owner, payload, metadata, failure_count`, `id = $1`) + ` LIMIT 1`,
		peekMany: fmt.Sprintf(`WITH c AS (SELECT id, destination, due, owner, payload, metadata, failure_count FROM %s WHERE id = ANY($1))
SELECT * FROM c UNION ALL
SELECT id, destination, due, owner, payload, metadata, failure_count FROM %s
WHERE id = ANY (ARRAY(SELECT unnest($1::text[]) EXCEPT SELECT id FROM c))`, c, t),
		// The table is only searched for ids the claimed table did not have.
		remove: fmt.Sprintf(`WITH c AS (DELETE FROM %s WHERE id = $1 RETURNING id),
t AS (DELETE FROM %s WHERE id = $1 AND NOT EXISTS (SELECT FROM c) RETURNING id)
SELECT count(*) FROM (SELECT id FROM c UNION ALL SELECT id FROM t) AS removed`, c, t),
		removeMany: removeMany(t, c),
		incrementFailureCount: fmt.Sprintf(`WITH c AS (UPDATE %[1]s SET failure_count = failure_count + 1 WHERE id = $1 RETURNING id),
t AS (UPDATE %[2]s SET failure_count = failure_count + 1 WHERE id = $1 AND NOT EXISTS (SELECT FROM c) RETURNING id)
SELECT count(*) FROM (SELECT id FROM c UNION ALL SELECT id FROM t) AS updated`, c, t),
		// owner <> '' matches the partial indexes, and keeps "" from meaning "every ownerless
		// timeout".
		cancelByOwner: fmt.Sprintf(`WITH c AS (DELETE FROM %s WHERE owner = $1 AND owner <> '' RETURNING id),
t AS (DELETE FROM %s WHERE owner = $1 AND owner <> '' RETURNING id)
SELECT count(*) FROM (SELECT id FROM c UNION ALL SELECT id FROM t) AS cancelled`, c, t),
		stats: fmt.Sprintf(`SELECT count(*), min(due), max(due) FROM (%s) AS timeouts`, fromBoth(`due`, `true`)),
		list: fmt.Sprintf(`SELECT * FROM (%s) AS timeouts ORDER BY due, id LIMIT $1`,
			fromBoth(`id, destination, due, owner, metadata, failure_count`, `true`)),
		listByOwner: fmt.Sprintf(`SELECT * FROM (%s) AS timeouts ORDER BY due, id LIMIT $2`,
			fromBoth(`id, destination, due, owner, metadata, failure_count`, `owner = $1 AND owner <> ''`)),
	}
}

// removeMany deletes the ids in $1 from the claimed table c, then those it did not have from the
// table t, and names the ids it deleted "removed": RemoveMany selects them, and RemoveManyWith
// lets an exactly-once forwarder's statements read them. Its other names start with removed_, so
// that they hide none of the tables those statements name.
func removeMany(t, c string) string {
	return fmt.Sprintf(`WITH removed_claimed AS (DELETE FROM %s WHERE id = ANY($1) RETURNING id),
removed_unclaimed AS (DELETE FROM %s WHERE id = ANY (ARRAY(SELECT unnest($1::text[]) EXCEPT SELECT id FROM removed_claimed)) RETURNING id),
removed AS (SELECT id FROM removed_claimed UNION ALL SELECT id FROM removed_unclaimed)`, c, t)
}
