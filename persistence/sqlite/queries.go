package sqlite

import (
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// queries holds the store's SQL, made once with the table name quoted.
type queries struct {
	setup []string
	// hasKey counts the key column of the table (0 in one an older version created): table name.
	hasKey string
	// addKey adds it; keyIndex makes keys unique.
	addKey, keyIndex string
	// hasParked counts the parking reason and claiming instance columns (2 once set up): table
	// name. addParked adds them to an older table.
	hasParked string
	addParked []string
	// claimedByIndex indexes the claiming instance, for ReleaseClaimsOf.
	claimedByIndex string
	core           sqlstore.Queries
}

// newQueries builds the SQL for a table whose name passed validateTable. The lease uses the
// available_at index too.
func newQueries(table string) queries {
	t := quoteIdent(table)
	availableIndex := quoteIdent(table + "_available_at")
	ownerIndex := quoteIdent(table + "_owner")
	dueIndex := quoteIdent(table + "_due")
	core := sqlstore.Standard(t, sqlstore.Positional)
	core.Store += ` ON CONFLICT (id) DO NOTHING`
	// Without a conflict target: a taken id or key inserts nothing and fails nothing. The
	// store's single writer (or, in ScheduleTx, the caller's transaction holding the write lock)
	// serializes Schedules, so the key's holder needs no lock of its own.
	core.Schedule += ` ON CONFLICT DO NOTHING`
	// One statement, by rowid: SQLite's UPDATE takes no LIMIT unless built with it, and the
	// single writer makes the select and the update one step.
	core.Claim = fmt.Sprintf(`UPDATE %[1]s SET available_at = @until, claimed_by = @by
WHERE rowid IN (SELECT rowid FROM %[1]s WHERE available_at <= @now ORDER BY available_at LIMIT @limit)
RETURNING id, due`, t)
	// available_at >= @from bounds the index scan: every row due at or after from is claimable at or
	// after from, and a hidden row after HiddenFrom. Rows a poller holds (leased past now, not
	// hidden) are skipped.
	// Parked rows (available_at at MaxDue) are left alone.
	core.Hide = fmt.Sprintf(`UPDATE %[1]s SET available_at = @mark, claimed_by = NULL
WHERE id IN (SELECT id FROM %[1]s WHERE available_at >= @from
	AND (due >= @from AND (available_at = due OR available_at <= @now) OR available_at >= @hiddenFrom AND available_at <> @mark)
	AND parked_reason IS NULL
	ORDER BY available_at LIMIT @limit)
RETURNING id, destination, due, owner, payload, metadata, failure_count, COALESCE(dedup_key, ''), COALESCE(parked_reason, '')`, t)
	return queries{
		core:   core,
		hasKey: `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'dedup_key'`,
		addKey: fmt.Sprintf(`ALTER TABLE %s ADD COLUMN dedup_key TEXT`, t),
		// Partial: most timeouts have no key.
		hasParked: `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name IN ('parked_reason', 'claimed_by')`,
		addParked: []string{
			fmt.Sprintf(`ALTER TABLE %s ADD COLUMN parked_reason TEXT`, t),
			fmt.Sprintf(`ALTER TABLE %s ADD COLUMN claimed_by TEXT`, t),
		},
		keyIndex: fmt.Sprintf(`CREATE UNIQUE INDEX IF NOT EXISTS %s ON %s (dedup_key) WHERE dedup_key IS NOT NULL`,
			quoteIdent(table+"_dedup_key"), t),
		// ReleaseClaimsOf's lookup, at a manager's start and after a claim whose answer was lost:
		// without it the statement reads the whole file. Partial: only rows a named instance holds
		// claimed have an entry. Made after addParked, which adds the column to an older table.
		claimedByIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (claimed_by) WHERE claimed_by IS NOT NULL`,
			quoteIdent(table+"_claimed_by"), t),
		setup: []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id TEXT NOT NULL PRIMARY KEY,
	destination TEXT NOT NULL,
	due INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	owner TEXT NOT NULL DEFAULT '',
	payload BLOB NOT NULL,
	metadata BLOB NOT NULL,
	failure_count INTEGER NOT NULL DEFAULT 0,
	dedup_key TEXT,
	parked_reason TEXT,
	claimed_by TEXT
)`, t),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (available_at)`, availableIndex, t),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (owner) WHERE owner <> ''`, ownerIndex, t),
			// List's order. List reads this index from the start or from the cursor's due
			// time, and sorts by id only the rows of one due time. Without it, every page sorts
			// the whole table. It holds due and the rowid, not the id, to stay narrow: every
			// insert writes to it (at its end, when due times rise). Set-up adds it to a table
			// an older version made.
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (due)`, dueIndex, t),
		},
	}
}
