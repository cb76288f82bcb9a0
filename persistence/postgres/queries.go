package postgres

import "fmt"

// queries holds the store's SQL, made once with the schema and table names quoted.
//
// A timeout is kept in three tables. Its row in the timeouts table (the one named by Config, the
// body: id, destination, due, owner, payload, headers, failure count) never moves until it is
// removed. Until it is claimed, a narrow row (due, id) in the schedule table says when it becomes
// claimable; a claim moves that row to the leases table (id, due, lease_until), where it stays
// until the timeout is removed, its lease runs out and another claim renews it, or Release puts
// it back. A claim thus deletes narrow rows and inserts them into a small table, and never copies
// a payload nor touches the timeouts table's indexes; the primary key of the timeouts table stays
// the one authority on which ids are stored.
type queries struct {
	// Quoted, qualified names, which to_regclass reads as SQL would; schemaName is unquoted.
	table, schedule, leases                       string
	ownerIndex, scheduleIndex, leasesIndex        string
	availableIndex                                string // of the one-table layout, dropped on upgrade
	schemaName, unquotedTable                     string
	createSchema                                  string
	createTable, createSchedule, createLeases     string
	createOwnerIndex, createScheduleIndex         string
	createLeasesIndex                             string
	store, storeMany                              string
	next, claim                                   string
	peek, peekMany                                string
	remove, removeMany, removeWith                string
	incrementFailureCount, cancelByOwner          string
	stats, list, listByOwner                      string
	upgradeSchedule, upgradeLeases, upgradeFinish string
	handover                                      handoverQueries
}

// newQueries builds the SQL for names that passed validateIdentifier.
//
// The schedule and the leases are read by their due and lease_until indexes, and no watermark is
// kept, so a timeout committed late is still found (NServiceBus#3500).
func newQueries(schema, table string) queries {
	s := quoteIdent(schema)
	t := s + "." + quoteIdent(table)
	sc := s + "." + quoteIdent(relationName(table, "schedule"))
	l := s + "." + quoteIdent(relationName(table, "leases"))
	ownerIndex := quoteIdent(relationName(table, "owner"))
	scheduleIndex := quoteIdent(relationName(table, "schedule_due"))
	leasesIndex := quoteIdent(relationName(table, "leases_until"))
	// unlinks deletes the schedule and lease rows of the timeouts with the ids of the SQL array
	// expression ids, the schedule's found by the due times in the timeouts table as the
	// statement found it (before its own deletes), and only for timeouts without a lease: a
	// claimed timeout's schedule row is gone, and looking for it would visit the dead index
	// entries the claim left, one heap page each (8 ms for a batch of 500 claimed ids). Every
	// condition is = ANY (array), which the planner answers with index scans: a join let it hash
	// a seq scan of the whole schedule (10 ms a batch at 20,000 rows). A lease is deleted by id
	// even when no timeout is left, so that a lease left by the race the claim's comment
	// describes goes with the next removal of its id.
	unlinks := func(ids string) string {
		return fmt.Sprintf(`unleased AS (
	DELETE FROM %[1]s WHERE id = ANY (%[3]s)
), unscheduled AS (
	DELETE FROM %[2]s WHERE id = ANY (%[3]s) AND due = ANY (ARRAY(
		SELECT due FROM %[4]s AS t WHERE id = ANY (%[3]s) AND NOT EXISTS (SELECT 1 FROM %[1]s AS l WHERE l.id = t.id)))
)`, l, sc, ids, t)
	}
	return queries{
		table:          t,
		schedule:       sc,
		leases:         l,
		ownerIndex:     s + "." + ownerIndex,
		scheduleIndex:  s + "." + scheduleIndex,
		leasesIndex:    s + "." + leasesIndex,
		availableIndex: s + "." + quoteIdent(relationName(table, "available_at")),
		schemaName:     schema,
		unquotedTable:  table,
		handover:       newHandoverQueries(t, sc, l),

		createSchema: fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %s`, s),
		// COLLATE "C": ids and owners compare byte for byte, whatever the database's locale.
		createTable: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id text COLLATE "C" NOT NULL PRIMARY KEY,
	destination text NOT NULL,
	due timestamptz NOT NULL,
	owner text COLLATE "C" NOT NULL DEFAULT '',
	payload bytea NOT NULL,
	metadata bytea NOT NULL,
	failure_count integer NOT NULL DEFAULT 0
)`, t),
		createSchedule: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	due timestamptz NOT NULL,
	id text COLLATE "C" NOT NULL
)`, sc),
		createLeases: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id text COLLATE "C" NOT NULL CONSTRAINT %s PRIMARY KEY,
	due timestamptz NOT NULL,
	lease_until timestamptz NOT NULL
)`, l, quoteIdent(relationName(table, "leases_pkey"))),
		// Only equality is asked of owners, and most rows have none: a partial hash index has no
		// length limit (a btree entry must fit in a third of a page) and stays small.
		createOwnerIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING hash (owner) WHERE owner <> ''`, ownerIndex, t),
		// due alone, not (due, id): the narrower key keeps a store's insert as cheap as the
		// one-table layout's; a schedule row is found by id through its due.
		createScheduleIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (due)`, scheduleIndex, sc),
		createLeasesIndex:   fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (lease_until)`, leasesIndex, l),

		// The schedule row is inserted only for a body that was inserted.
		store: fmt.Sprintf(`WITH body AS (
	INSERT INTO %s (id, destination, due, owner, payload, metadata, failure_count)
	VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING RETURNING id, due
)
INSERT INTO %s (due, id) SELECT due, id FROM body`, t, sc),
		storeMany: fmt.Sprintf(`WITH body AS (
	INSERT INTO %s (id, destination, due, owner, payload, metadata, failure_count)
	SELECT id, destination, due, owner, payload, metadata, failure_count
	FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bytea[], $6::bytea[], $7::int[])
		AS t(id, destination, due, owner, payload, metadata, failure_count)
	ORDER BY id
	ON CONFLICT (id) DO NOTHING RETURNING id, due
), scheduled AS (
	INSERT INTO %s (due, id) SELECT due, id FROM body
)
SELECT id FROM body`, t, sc),
		next: fmt.Sprintf(`SELECT least((SELECT min(due) FROM %s), (SELECT min(lease_until) FROM %s))`, sc, l),
		// One statement. Candidates are the earliest due schedule rows and the leases that ran
		// out, each locked with FOR UPDATE SKIP LOCKED, so concurrent claims never wait for each
		// other nor take the same row; of those, the limit that became claimable first are taken:
		// schedule rows are deleted by their ctid (a TID scan, no second index descent) and
		// inserted into the leases, leases that ran out are renewed. A lease whose timeout is gone
		// (left by a Remove that ran while a claim moved its row) is deleted once it runs out, and
		// a lease left that way never blocks the same id stored again (ON CONFLICT). The
		// transaction commits without waiting for its WAL to be flushed (synchronous_commit = off,
		// for this transaction only): see ClaimDue.
		claim: fmt.Sprintf(`WITH ran_out AS (
	SELECT id, lease_until AS at FROM %[3]s AS l
	WHERE lease_until <= $1 AND EXISTS (SELECT 1 FROM %[1]s AS t WHERE t.id = l.id)
	ORDER BY lease_until LIMIT $2 FOR UPDATE SKIP LOCKED
), due AS (
	SELECT ctid AS rid, due AS at FROM %[2]s WHERE due <= $1 ORDER BY due LIMIT $2 FOR UPDATE SKIP LOCKED
), picked AS (
	SELECT id, NULL::tid AS rid, at FROM ran_out
	UNION ALL SELECT NULL, rid, at FROM due
	ORDER BY at LIMIT $2
), orphans AS (
	DELETE FROM %[3]s AS l WHERE lease_until <= $1 AND NOT EXISTS (SELECT 1 FROM %[1]s AS t WHERE t.id = l.id)
), renewed AS (
	UPDATE %[3]s SET lease_until = $3 WHERE id = ANY (ARRAY(SELECT id FROM picked WHERE rid IS NULL))
	RETURNING id, due
), moved AS (
	DELETE FROM %[2]s WHERE ctid = ANY (ARRAY(SELECT rid FROM picked WHERE rid IS NOT NULL))
	AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
	RETURNING id, due
), leased AS (
	INSERT INTO %[3]s (id, due, lease_until) SELECT id, due, $3 FROM moved
	ON CONFLICT (id) DO UPDATE SET due = excluded.due, lease_until = excluded.lease_until
)
SELECT id, due FROM renewed UNION ALL SELECT id, due FROM moved`, t, sc, l),
		peek:                  fmt.Sprintf(`SELECT destination, due, owner, payload, metadata, failure_count FROM %s WHERE id = $1`, t),
		peekMany:              fmt.Sprintf(`SELECT id, destination, due, owner, payload, metadata, failure_count FROM %s WHERE id = ANY($1)`, t),
		remove:                fmt.Sprintf(`WITH %s DELETE FROM %s WHERE id = $1`, unlinks("ARRAY[$1]"), t),
		removeMany:            fmt.Sprintf(`WITH %s DELETE FROM %s WHERE id = ANY ($1) RETURNING id`, unlinks("$1"), t),
		removeWith:            fmt.Sprintf(`WITH removed AS (DELETE FROM %s WHERE id = ANY ($1) RETURNING id), %s`, t, unlinks("$1")),
		incrementFailureCount: fmt.Sprintf(`UPDATE %s SET failure_count = failure_count + 1 WHERE id = $1`, t),
		// owner <> '' matches the partial index, and keeps "" from meaning "every ownerless timeout".
		cancelByOwner: fmt.Sprintf(`WITH gone AS (
	DELETE FROM %s WHERE owner = $1 AND owner <> '' RETURNING id, due
), unleased AS (
	DELETE FROM %s WHERE id = ANY (ARRAY(SELECT id FROM gone))
), unscheduled AS (
	DELETE FROM %s WHERE due = ANY (ARRAY(SELECT due FROM gone)) AND id = ANY (ARRAY(SELECT id FROM gone))
)
SELECT count(*) FROM gone`, t, l, sc),
		stats: fmt.Sprintf(`SELECT count(*), min(due), max(due) FROM %s`, t),
		list: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
ORDER BY due, id LIMIT $1`, t),
		listByOwner: fmt.Sprintf(`SELECT id, destination, due, owner, metadata, failure_count FROM %s
WHERE owner = $1 AND owner <> '' ORDER BY due, id LIMIT $2`, t),

		// The one-table layout kept available_at in the timeouts table: its due until claimed,
		// then the end of the lease. Upgrading splits it into the schedule and the leases.
		upgradeSchedule: fmt.Sprintf(`INSERT INTO %s (due, id) SELECT due, id FROM %s WHERE available_at = due`, sc, t),
		upgradeLeases:   fmt.Sprintf(`INSERT INTO %s (id, due, lease_until) SELECT id, due, available_at FROM %s WHERE available_at <> due`, l, t),
		upgradeFinish:   fmt.Sprintf(`ALTER TABLE %s DROP COLUMN available_at`, t),
	}
}
