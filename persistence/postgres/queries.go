package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// queries holds the store's SQL, made once with the schema and table names quoted.
type queries struct {
	// Quoted, qualified names, which to_regclass reads as SQL would; schemaName is unquoted.
	table, availableIndex, ownerIndex, keyIndex, dueIndex, claimedByIndex string
	schemaName                                                            string

	createSchema         string
	createTable          string
	createAvailableIndex string
	createOwnerIndex     string
	// addKey adds the key column to a table an older version created, addParked the parking
	// reason and the claiming instance; createKeyIndex, createDueIndex and createClaimedByIndex
	// add their indexes.
	addKey               string
	addParked            string
	createKeyIndex       string
	createDueIndex       string
	createClaimedByIndex string
	// storeMany inserts the rows of a StoreMany, in id order, and returns the ids it inserted.
	storeMany string
	// counts are what Stats reads (see counts).
	counts counts
	core   sqlstore.Queries
}

// newQueries builds the SQL for names that passed validateIdentifier.
func newQueries(schema, table string) queries {
	s := quoteIdent(schema)
	t := s + "." + quoteIdent(table)
	availableIndex := quoteIdent(indexName(table, "available_at"))
	ownerIndex := quoteIdent(indexName(table, "owner"))
	keyIndex := quoteIdent(indexName(table, "dedup_key"))
	dueIndex := quoteIdent(indexName(table, "due_id"))
	claimedByIndex := quoteIdent(indexName(table, "claimed_by"))
	core := sqlstore.Standard(t, sqlstore.Numbered)
	// clock_timestamp(), not now(): now() is when the transaction began (persistence.Clocked).
	core.Now = `SELECT clock_timestamp()`
	core.Store += ` ON CONFLICT (id) DO NOTHING`
	// Without a conflict target: a taken id or key inserts nothing, and, unlike a unique
	// violation, leaves a caller's transaction usable (ScheduleTx).
	core.Schedule += ` ON CONFLICT DO NOTHING`
	core.KeyHolder += ` FOR UPDATE`
	// Schedules of one key wait in turn for a lock on it: locking the holder's row alone, each
	// replace would delete the row the others wait for, and they would all go round again.
	core.KeyLock = fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d, hashtext(@key))`, lockSpace(t))
	// One statement: lock the earliest claimable rows, skipping rows another claim holds, and
	// move them to the end of the lease. The locked rows are updated by their ctid (a TID scan)
	// rather than looked up again by id: a row we hold locked cannot move, and this saves a
	// descent of the primary key per row, which at a million rows is a page read per row. A row
	// updated by someone else after the statement's snapshot is not updated here and stays
	// unclaimed, never claimed twice. The transaction of the claim commits without waiting for
	// its WAL to be flushed (synchronous_commit = off, set for this transaction only): see
	// ClaimDue.
	core.Claim = fmt.Sprintf(`UPDATE %[1]s AS t SET available_at = @until, claimed_by = @by
WHERE t.ctid = ANY (ARRAY(
	SELECT ctid FROM %[1]s WHERE available_at <= @now ORDER BY available_at LIMIT @limit FOR UPDATE SKIP LOCKED
))
AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
RETURNING t.id, t.due`, t)
	// available_at >= @from bounds the index scan: every row due at or after from is claimable at
	// or after from, and a hidden row after HiddenFrom. Rows a poller holds (leased past now, not
	// hidden) are skipped, and rows another Hide is taking are skipped as a claim skips them.
	// Parked rows (available_at at MaxDue) are left alone.
	core.Hide = fmt.Sprintf(`WITH hidden AS (
	SELECT id FROM %[1]s WHERE available_at >= @from
		AND (due >= @from AND (available_at = due OR available_at <= @now) OR available_at >= @hiddenFrom AND available_at <> @mark)
		AND parked_reason IS NULL
	ORDER BY available_at LIMIT @limit FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s AS t SET available_at = @mark, claimed_by = NULL FROM hidden WHERE t.id = hidden.id
RETURNING t.id, t.destination, t.due, t.owner, t.payload, t.metadata, t.failure_count, COALESCE(t.dedup_key, ''),
	COALESCE(t.parked_reason, '')`, t)
	return queries{
		table:          t,
		availableIndex: s + "." + availableIndex,
		ownerIndex:     s + "." + ownerIndex,
		keyIndex:       s + "." + keyIndex,
		dueIndex:       s + "." + dueIndex,
		claimedByIndex: s + "." + claimedByIndex,
		schemaName:     schema,
		counts:         newCounts(s, t, table),
		storeMany: fmt.Sprintf(`INSERT INTO %s (%s)
SELECT id, destination, due, due, owner, payload, metadata, failure_count
FROM unnest(@ids::text[], @destinations::text[], @dues::timestamptz[], @owners::text[], @payloads::bytea[],
	@metadata::bytea[], @failures::int[])
	AS t(id, destination, due, owner, payload, metadata, failure_count)
ORDER BY id
ON CONFLICT (id) DO NOTHING RETURNING id`, t, sqlstore.Columns),
		core: core,

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
	failure_count integer NOT NULL DEFAULT 0,
	dedup_key text COLLATE "C",
	parked_reason text,
	claimed_by text COLLATE "C"
)`, t),
		createAvailableIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (available_at)`, availableIndex, t),
		// Only equality is asked of owners, and most rows have none: a partial hash index has no
		// length limit (a btree entry must fit in a third of a page) and stays small.
		createOwnerIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING hash (owner) WHERE owner <> ''`, ownerIndex, t),
		addKey:           fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS dedup_key text COLLATE "C"`, t),
		// Nullable without a default: PostgreSQL adds them without rewriting the table.
		addParked: fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS parked_reason text,
	ADD COLUMN IF NOT EXISTS claimed_by text COLLATE "C"`, t),
		// Partial: most timeouts have no key, and only keys need be unique.
		createKeyIndex: fmt.Sprintf(`CREATE UNIQUE INDEX IF NOT EXISTS %s ON %s (dedup_key) WHERE dedup_key IS NOT NULL`, keyIndex, t),
		// List's order, so that a page (the first, or the one after a cursor) reads as many index
		// entries as it returns rather than sorting the table.
		createDueIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (due, id)`, dueIndex, t),
		// ReleaseClaimsOf's lookup, at a manager's start and after a failed claim: without it the
		// statement reads the whole table, for longer than a call may take once the table holds
		// millions (the planner cannot tell that the claimed index holds few rows). Partial: only
		// rows a named instance holds claimed have an entry, and a claim already writes every
		// index of the rows it moves.
		createClaimedByIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (claimed_by) WHERE claimed_by IS NOT NULL`,
			claimedByIndex, t),
	}
}

// lockSpace is the first half of the advisory locks of keys in table t, so that keys of other
// tables rarely share them (when they do, two Schedules only wait for each other).
func lockSpace(t string) int32 {
	h := fnv.New32a()
	h.Write([]byte(t))
	return int32(h.Sum32())
}

// dialect is how the core runs a store on db, which Close closes when ownsDB.
func (q queries) dialect(db *sql.DB, ownsDB bool) (sqlstore.Dialect, error) {
	storeMany, err := sqlstore.Compile[rows](&sqlstore.Binding{Style: sqlstore.Numbered}, q.storeMany)
	if err != nil {
		return sqlstore.Dialect{}, fmt.Errorf("postgres: StoreMany: %w", err)
	}
	d := sqlstore.Dialect{
		Name: "postgres",
		DB:   db,
		SQL:  q.core,
		Bind: sqlstore.Binding{
			Style: sqlstore.Numbered,
			Times: sqlstore.TimeValue,
			// One array parameter, of any length.
			IDs: sqlstore.IDsArray,
		},
		Check: sqlstore.Check{Validate: validateTimeout},
		Errors: sqlstore.Errors{
			// A deadlock victim of a Schedule, which PostgreSQL rolled back.
			Retry: func(err error) bool {
				var pe *pgconn.PgError
				return errors.As(err, &pe) && pe.Code == "40P01"
			},
		},
		Own: sqlstore.Own{
			// One INSERT of arrays (unnest) takes a batch of any size in one round trip.
			StoreRows: func(ctx context.Context, db sqlstore.Querier, rs []sqlstore.Row) ([]string, error) {
				return sqlstore.QueryIDs(ctx, db, storeMany.SQL, storeMany.Args(columns(rs)))
			},
			// The counts the database keeps as rows change (see counts), not a scan of the table.
			Stats: func(ctx context.Context, now time.Time) (persistence.Stats, error) {
				return q.counts.read(ctx, db, now)
			},
		},
	}
	d.Locks.Hold = func(ctx context.Context, instance string) (func() error, bool, error) {
		key := q.instanceLock(instance)
		return sqlstore.HoldOnConn(ctx, db, sqlstore.SessionLock{
			// Never on a standby, where advisory locks work too but are the standby's own: a
			// DSN that lists a primary and its standby without target_session_attrs=read-write
			// may connect to either.
			Try: func(ctx context.Context, conn *sql.Conn) (bool, error) {
				var held sql.NullBool
				err := conn.QueryRowContext(ctx,
					`SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_try_advisory_lock($1) END`, key).Scan(&held)
				if err == nil && !held.Valid {
					err = errors.New("the server is a standby (in recovery): an instance name is held on the primary " +
						"(list the hosts with target_session_attrs=read-write)")
				}
				return held.Bool, err
			},
			Unlock: func(ctx context.Context, conn *sql.Conn) error {
				_, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key)
				return err
			},
		})
	}
	if ownsDB {
		d.Close = db.Close
	}
	return d, nil
}

// instanceLock is the key of the session advisory lock that holds instance on the table: 64 bits
// of a hash of both, in the one-bigint key space (Schedule's key locks use the two-integer one).
func (q queries) instanceLock(instance string) int64 {
	sum := sha256.Sum256([]byte("timeoutmill instance\x00" + q.table + "\x00" + instance))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// rows are the rows of a StoreMany as arrays, one per column, which storeMany takes.
type rows struct {
	ids, destinations, owners []string
	dues                      []time.Time
	payloads, metadata        [][]byte
	failures                  []int32
}

// Bind gives storeMany's names.
func (r rows) Bind(b *sqlstore.Binder) {
	b.Value("ids", r.ids)
	b.Value("destinations", r.destinations)
	b.Value("dues", r.dues)
	b.Value("owners", r.owners)
	b.Value("payloads", r.payloads)
	b.Value("metadata", r.metadata)
	b.Value("failures", r.failures)
}

// columns returns rs as arrays.
func columns(rs []sqlstore.Row) rows {
	c := rows{
		ids: make([]string, len(rs)), destinations: make([]string, len(rs)), owners: make([]string, len(rs)),
		dues: make([]time.Time, len(rs)), payloads: make([][]byte, len(rs)), metadata: make([][]byte, len(rs)),
		failures: make([]int32, len(rs)),
	}
	for i, r := range rs {
		c.ids[i], c.destinations[i], c.owners[i] = r.T.ID, r.T.Destination, r.T.Owner
		c.dues[i], c.payloads[i], c.metadata[i], c.failures[i] = r.Due, r.Payload, r.Metadata, int32(r.T.FailureCount)
	}
	return c
}

// validateTimeout checks what text columns require beyond what every store requires.
func validateTimeout(t persistence.Timeout) error {
	for _, f := range []struct{ name, value string }{{"id", t.ID}, {"destination", t.Destination}, {"owner", t.Owner}, {"key", t.Key}} {
		if !utf8.ValidString(f.value) {
			return fmt.Errorf("%w: %s %q is not valid UTF-8, which PostgreSQL's text requires", persistence.ErrInvalidTimeout, f.name, f.value)
		}
		if strings.ContainsRune(f.value, 0) {
			return fmt.Errorf("%w: %s %q contains a NUL byte, which PostgreSQL's text cannot hold", persistence.ErrInvalidTimeout, f.name, f.value)
		}
	}
	return nil
}
