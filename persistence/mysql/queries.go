package mysql

import (
	"fmt"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// queries holds the store's SQL, made once with the table name quoted.
type queries struct {
	createTable string
	// tableExists fails with ER_NO_SUCH_TABLE when the table is missing, and with
	// ER_BAD_FIELD_ERROR when an older version created it without the key column, which addKey
	// adds with its unique index.
	tableExists string
	addKey      string
	// addParked adds the parking reason and the claiming instance to an older table.
	addParked string
	// claimedByIndex returns a row when the table has ReleaseClaimsOf's index, which
	// addClaimedByIndex adds to an older table.
	claimedByIndex, addClaimedByIndex string
	// claimSelect and hideSelect lock the rows a claim or a Hide then moves by id.
	claimSelect, hideSelect string
	table                   string
	core                    sqlstore.Queries
}

// newQueries builds the SQL for a table whose name passed validateTable. Index names are the
// table's own in MariaDB, so they need no prefix.
func newQueries(table string) queries {
	t := quoteIdent(table)
	// Store and Schedule are plain INSERTs whose duplicate-key error means "the id or key is
	// taken" (the server undoes the statement alone, the transaction goes on): INSERT IGNORE
	// would hide other errors too, and ON DUPLICATE KEY UPDATE's affected-rows count depends on
	// the DSN's clientFoundRows, so it could not tell an insert from a duplicate.
	core := sqlstore.Standard(t, sqlstore.Positional)
	// Locking reads: they read the latest committed row even in a caller's REPEATABLE READ
	// transaction, whose snapshot would not show what a concurrent Schedule committed.
	core.Exists += ` LOCK IN SHARE MODE`
	core.KeyHolder += ` FOR UPDATE`
	// The server's clock in UTC, whatever the session's time_zone (persistence.Clocked).
	core.Now = `SELECT UTC_TIMESTAMP(6)`
	return queries{
		table: t,
		core:  core,
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
			"\tdedup_key VARBINARY(250) NULL,\n"+
			"\tparked_reason BLOB NULL,\n"+
			"\tclaimed_by VARBINARY(250) NULL,\n"+
			"\tPRIMARY KEY (id),\n"+
			"\tINDEX available_at (available_at),\n"+
			"\tINDEX owner (owner(255)),\n"+
			"\tUNIQUE INDEX dedup_key (dedup_key),\n"+
			"\tINDEX claimed_by (claimed_by)\n"+
			") ENGINE=InnoDB", t),
		// Fails with ER_NO_SUCH_TABLE when missing. Exact, unlike information_schema, whose names
		// compare case-insensitively.
		tableExists: fmt.Sprintf(`SELECT dedup_key, parked_reason, claimed_by FROM %s LIMIT 0`, t),
		// One statement, IF NOT EXISTS: instances migrating together wait for each other's
		// metadata lock and find the column made. A unique index keeps any number of NULLs.
		addKey: fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS dedup_key VARBINARY(250) NULL,
	ADD UNIQUE INDEX IF NOT EXISTS dedup_key (dedup_key)`, t),
		// Nullable, without an index: MariaDB adds them in place, without copying the table.
		addParked: fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS parked_reason BLOB NULL,
	ADD COLUMN IF NOT EXISTS claimed_by VARBINARY(250) NULL`, t),
		// ReleaseClaimsOf's lookup, at a manager's start and after a claim whose answer was lost:
		// without it the statement reads the whole table, for longer than a call may take once the
		// table holds millions.
		claimedByIndex:    fmt.Sprintf(`SHOW INDEX FROM %s WHERE Key_name = 'claimed_by'`, t),
		addClaimedByIndex: fmt.Sprintf(`ALTER TABLE %s ADD INDEX IF NOT EXISTS claimed_by (claimed_by)`, t),
		// FORCE INDEX: read the index in order and stop at limit, so that only the rows claimed
		// are locked; a table scan and sort would lock every due row and starve other pollers.
		claimSelect: fmt.Sprintf(`SELECT id, due FROM %s FORCE INDEX (available_at)
WHERE available_at <= @now ORDER BY available_at LIMIT @limit FOR UPDATE SKIP LOCKED`, t),
		// available_at >= @from bounds the index scan: every row due at or after from is claimable
		// at or after from, and a hidden row after HiddenFrom. Rows a poller holds (leased past
		// now, not hidden) are skipped, and rows another Hide is taking are skipped as a claim
		// skips them.
		// Parked rows (available_at at MaxDue) are left alone.
		hideSelect: fmt.Sprintf(`SELECT id, destination, due, owner, payload, metadata, failure_count, COALESCE(dedup_key, ''),
	COALESCE(parked_reason, '')
FROM %s FORCE INDEX (available_at)
WHERE available_at >= @from AND (due >= @from AND (available_at = due OR available_at <= @now)
		OR available_at >= @hiddenFrom AND available_at <> @mark)
	AND parked_reason IS NULL
ORDER BY available_at LIMIT @limit FOR UPDATE SKIP LOCKED`, t),
	}
}

// binding is how the store sends and reads values: ? in order, ids and owners as the binary
// strings their columns hold, times as DATETIME text in UTC (so that the DSN's parseTime and loc,
// and the session's time_zone, change nothing).
func binding() sqlstore.Binding {
	return sqlstore.Binding{Style: sqlstore.Positional, BinaryText: true, Times: sqlstore.TimeText, MaxIn: maxIn}
}

// lockParams are what claimSelect takes: rows claimable at @now, at most @limit.
type lockParams struct {
	Now   time.Time
	Limit int
}

// Bind gives claimSelect's names.
func (p lockParams) Bind(b *sqlstore.Binder) {
	b.Time("now", p.Now)
	b.Int("limit", p.Limit)
}

// storeRow is one row of storeMany's VALUES, in the order of sqlstore.Columns.
const storeRow = "(@id, @destination, @due, @due, @owner, @state, @headers, @failureCount)"

// selects are claimSelect, hideSelect and storeRow compiled.
type selects struct {
	claim sqlstore.Stmt[lockParams]
	hide  sqlstore.Stmt[sqlstore.HideParams]
	row   sqlstore.Stmt[sqlstore.StoreParams]
}

func (q queries) compile() (selects, error) {
	b := binding()
	claim, err := sqlstore.Compile[lockParams](&b, q.claimSelect)
	if err != nil {
		return selects{}, fmt.Errorf("mysql: claim: %w", err)
	}
	hide, err := sqlstore.Compile[sqlstore.HideParams](&b, q.hideSelect)
	if err != nil {
		return selects{}, fmt.Errorf("mysql: hide: %w", err)
	}
	row, err := sqlstore.Compile[sqlstore.StoreParams](&b, storeRow)
	if err != nil {
		return selects{}, fmt.Errorf("mysql: StoreMany: %w", err)
	}
	return selects{claim: claim, hide: hide, row: row}, nil
}

// placeholders returns "?, ?, …, ?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// moveIn moves n rows, claimed or hidden, to a new available_at and records their claiming
// instance (NULL for none): available_at, instance, ids.
func (q queries) moveIn(n int) string {
	return fmt.Sprintf(`UPDATE %s SET available_at = ?, claimed_by = ? WHERE id IN (%s)`, q.table, placeholders(n))
}

// storeMany inserts n rows: Store's statement with n value lists, each row (storeRow compiled).
func (q queries) storeMany(row string, n int) string {
	return fmt.Sprintf(`INSERT INTO %s (%s)
VALUES %s`, q.table, sqlstore.Columns, strings.TrimSuffix(strings.Repeat(row+", ", n), ", "))
}

// idsIn selects which of n ids are stored.
func (q queries) idsIn(n int) string {
	return fmt.Sprintf(`SELECT id FROM %s WHERE id IN (%s)`, q.table, placeholders(n))
}

// deleteIn deletes the timeouts with n ids.
func (q queries) deleteIn(n int) string {
	return fmt.Sprintf(`DELETE FROM %s WHERE id IN (%s)`, q.table, placeholders(n))
}
