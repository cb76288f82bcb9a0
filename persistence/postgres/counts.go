package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// Stats answers from counts the database keeps, and from index ranges that hold only what they
// count, so that it costs the same at ten million timeouts as at ten:
//
//   - Pending, Parked and ByDestination sum a small table of counts, one row per destination and
//     change: triggers on the timeouts table append a row of deltas for every statement that
//     inserts, deletes, parks or unparks timeouts, in the transaction of that statement, so a
//     rollback or a crash cannot skew them, and concurrent writers append rows rather than
//     update one, so they never wait for each other. Stats folds the rows into one per
//     destination, as the triggers do now and then.
//   - DueNow sums a second small table, of how many timeouts that are not parked are due in
//     each minute (in UTC), for the minutes before now's, which the same triggers keep, and
//     counts the rest of now's minute in the (due, id) index, less the parked ones there (from a
//     partial index of the parked timeouts): it reads one row per minute that has timeouts due,
//     and the timeouts due in one minute, however many are overdue.
//   - Claimed counts a partial index of the claimed timeouts (available_at not their due time):
//     it reads as many entries as pollers hold, and those of claims that ended since the last
//     vacuum.
//   - Earliest and Latest are the two ends of the (due, id) index.
//
// One statement reads them all, so they agree with each other.
//
// The same triggers keep the pending timeouts per owner for CountOwners: a statement appends its
// deltas, one row per owner, to a table without index, which a fold adds into a table of one row
// per owner, indexed by count (see CountOwners).
type counts struct {
	// table is the counts' table, qualified and quoted; fn the trigger function's name; dues
	// the table of timeouts due per minute; owners the table of pending timeouts per owner, and
	// ownerDeltas the deltas not yet added to it.
	table, fn, dues, owners, ownerDeltas string
	// parkedIndex and claimedIndex are the partial indexes of parked and claimed timeouts.
	parkedIndex, claimedIndex string

	createTable, grantRead, createFunction string
	createDues, grantReadDues              string
	createParkedIndex, createClaimedIndex  string
	createOwners, createOwnerDeltas        string
	createOwnersIndex                      string
	grantReadOwners                        []string
	lockTimeouts                           string
	dropTriggers, createTriggers, reset    []string
	fold, stats, total                     string
	// foldCounts folds the counts alone, for Count; foldOwners the owners' deltas alone, for
	// CountOwners.
	foldCounts, foldOwners string
	// folded is when a fold of everything last ran to its end on this store, in Unix
	// nanoseconds: CountDue does not fold again within foldFresh of it.
	folded *atomic.Int64
	// due counts, for CountDue, the timeouts in each bucket of due times, and apart the parked.
	due string
	// ownerDeltasRead sums the deltas per owner; topOwners reads the owners with the most
	// pending timeouts ($1 of them); ownersOf reads the owners $1.
	ownerDeltasRead, topOwners, ownersOf string
}

// Trigger names, in the timeouts table's own name space.
var countTriggers = []string{"timeoutmill_count_insert", "timeoutmill_count_delete", "timeoutmill_count_park",
	"timeoutmill_count_truncate", "timeoutmill_count_due"}

// minute is the SQL of the minute of the dues table that timestamp x falls in: truncated in UTC,
// whatever the session's TimeZone, so that the triggers and Stats agree on every bound.
func minute(x string) string { return "date_trunc('minute', " + x + ", 'UTC')" }

// newCounts makes the SQL of the counts of table t (qualified, quoted) in schema s (quoted).
func newCounts(s, t, table string) counts {
	c := counts{
		table:        s + "." + quoteIdent(indexName(table, "counts")),
		dues:         s + "." + quoteIdent(indexName(table, "dues")),
		fn:           s + "." + quoteIdent(indexName(table, "count")),
		parkedIndex:  s + "." + quoteIdent(indexName(table, "parked")),
		claimedIndex: s + "." + quoteIdent(indexName(table, "claimed")),
		owners:       s + "." + quoteIdent(indexName(table, "owners")),
		ownerDeltas:  s + "." + quoteIdent(indexName(table, "owner_deltas")),
		folded:       new(atomic.Int64),
	}
	// Many Stats at once fold in turn: the first takes the lock, the others find it taken and
	// only read. Under READ COMMITTED a row deleted by a fold that committed meanwhile is
	// skipped, so each delta is summed once whoever folds it.
	//
	c.foldCounts = fmt.Sprintf(`WITH turn AS (SELECT pg_try_advisory_xact_lock(%[2]d, 1) AS ours),
folded AS (DELETE FROM %[1]s WHERE (SELECT ours FROM turn) RETURNING destination, pending, parked)
INSERT INTO %[1]s (destination, pending, parked)
SELECT destination, sum(pending), sum(parked) FROM folded GROUP BY destination
HAVING sum(pending) <> 0 OR sum(parked) <> 0`, c.table, lockSpace(c.table))
	// The dues fold only the minutes that changed since the last fold: every row of those
	// minutes becomes one folded row, none when they sum to 0, so the table keeps one row per
	// minute with timeouts due. Each statement reads after the lock is taken, so it sees the
	// rows the last fold made (a statement that read before would leave them beside its own,
	// and a minute whose rows sum to 0 would keep them until it changed again).
	ownersBody := fmt.Sprintf(`WITH added AS (DELETE FROM %[2]s RETURNING owner, n)
	INSERT INTO %[1]s AS o (owner, n) SELECT owner, sum(n) FROM added GROUP BY owner HAVING sum(n) <> 0 ORDER BY owner
	ON CONFLICT (owner) DO UPDATE SET n = o.n + excluded.n;
	DELETE FROM %[1]s WHERE n = 0;`, c.owners, c.ownerDeltas)
	c.foldOwners = "DO " + dollarQuote(fmt.Sprintf("BEGIN\nIF pg_try_advisory_xact_lock(%d, 1) THEN\n\t%s\nEND IF;\nEND", lockSpace(c.table), ownersBody))
	foldBody := fmt.Sprintf(`IF pg_try_advisory_xact_lock(%[2]d, 1) THEN
	WITH folded AS (DELETE FROM %[1]s RETURNING destination, pending, parked)
	INSERT INTO %[1]s (destination, pending, parked)
	SELECT destination, sum(pending), sum(parked) FROM folded GROUP BY destination
	HAVING sum(pending) <> 0 OR sum(parked) <> 0;
	WITH merged AS (DELETE FROM %[3]s WHERE bucket IN (SELECT bucket FROM %[3]s WHERE NOT folded) RETURNING bucket, n)
	INSERT INTO %[3]s (bucket, n, folded) SELECT bucket, sum(n), true FROM merged GROUP BY bucket HAVING sum(n) <> 0;
	%[4]s
END IF;`, c.table, lockSpace(c.table), c.dues, ownersBody)
	c.fold = "DO " + dollarQuote("BEGIN\n"+foldBody+"\nEND")
	// No index: Stats reads every row, and a fold every row of the minutes it folds.
	c.createDues = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	bucket timestamptz NOT NULL,
	n bigint NOT NULL,
	folded boolean NOT NULL DEFAULT false
)`, c.dues)
	// Writers only append to the deltas, so they never wait for each other, even on one owner;
	// only a fold, under the lock, changes the owners' rows. An owner per saga makes as many rows
	// as timeouts: the index on counts reads the top ones, and a fold finds its owners by the key.
	c.createOwnerDeltas = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	owner text COLLATE "C" NOT NULL,
	n bigint NOT NULL
)`, c.ownerDeltas)
	c.createOwners = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	owner text COLLATE "C" PRIMARY KEY,
	n bigint NOT NULL
)`, c.owners)
	c.createOwnersIndex = fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (n DESC, owner)`,
		quoteIdent(indexName(table, "owners_n")), c.owners)
	c.grantReadOwners = []string{fmt.Sprintf(`GRANT SELECT ON %s TO PUBLIC`, c.owners),
		fmt.Sprintf(`GRANT SELECT ON %s TO PUBLIC`, c.ownerDeltas)}
	c.createTable = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	destination text NOT NULL,
	pending bigint NOT NULL,
	parked bigint NOT NULL
)`, c.table)
	// Any role that may read the schema may read the counts, as it may read the table's size
	// in pg_class, so that a role granted the timeouts table alone gets its Stats; folding
	// needs the right to change them, and the triggers have it.
	c.grantRead = fmt.Sprintf(`GRANT SELECT ON %s TO PUBLIC`, c.table)
	c.grantReadDues = fmt.Sprintf(`GRANT SELECT ON %s TO PUBLIC`, c.dues)
	// One row of deltas per destination a statement changed. A statement that inserts into a
	// READ COMMITTED transaction folds now and then, so that the table stays small when nobody
	// calls Stats; a caller's REPEATABLE READ or SERIALIZABLE transaction never does, where a
	// concurrent fold's deletes would fail it.
	//
	// The dues get one row per minute a statement changed, of the timeouts not parked: parking
	// takes one from its minute and unparking gives one back; a new due time (Reschedule, of a
	// timeout not parked) moves one from its old minute to its new one.
	body := fmt.Sprintf(`BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO %[1]s (destination, pending, parked)
		SELECT destination, count(*), count(parked_reason) FROM changed GROUP BY destination;
		INSERT INTO %[3]s (bucket, n)
		SELECT %[4]s, count(*) FROM changed WHERE parked_reason IS NULL GROUP BY 1;
		INSERT INTO %[7]s (owner, n) SELECT owner, count(*) FROM changed GROUP BY owner;
		IF random() < 0.001 AND current_setting('transaction_isolation') = 'read committed' THEN
			%[2]s
		END IF;
	ELSIF TG_OP = 'DELETE' THEN
		INSERT INTO %[1]s (destination, pending, parked)
		SELECT destination, -count(*), -count(parked_reason) FROM changed GROUP BY destination;
		INSERT INTO %[3]s (bucket, n)
		SELECT %[4]s, -count(*) FROM changed WHERE parked_reason IS NULL GROUP BY 1;
		INSERT INTO %[7]s (owner, n) SELECT owner, -count(*) FROM changed GROUP BY owner;
	ELSIF TG_OP = 'UPDATE' AND (OLD.parked_reason IS NULL) = (NEW.parked_reason IS NULL) THEN
		INSERT INTO %[3]s (bucket, n) VALUES (%[5]s, -1), (%[6]s, 1);
	ELSIF TG_OP = 'UPDATE' AND NEW.parked_reason IS NULL THEN
		INSERT INTO %[1]s (destination, pending, parked) VALUES (NEW.destination, 0, -1);
		INSERT INTO %[3]s (bucket, n) VALUES (%[6]s, 1);
	ELSIF TG_OP = 'UPDATE' THEN
		INSERT INTO %[1]s (destination, pending, parked) VALUES (NEW.destination, 0, 1);
		INSERT INTO %[3]s (bucket, n) VALUES (%[5]s, -1);
	ELSE
		DELETE FROM %[1]s;
		DELETE FROM %[3]s;
		DELETE FROM %[7]s;
		DELETE FROM %[8]s;
	END IF;
	RETURN NULL;
END`, c.table, foldBody, c.dues, minute("due"), minute("OLD.due"), minute("NEW.due"), c.ownerDeltas, c.owners)
	// SECURITY DEFINER: a role granted the timeouts table alone (by a DBA who set it up) may
	// change it, and the counts with it. Every name in the body is qualified.
	c.createFunction = fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %s`, c.fn, dollarQuote(body))
	for _, name := range countTriggers {
		c.dropTriggers = append(c.dropTriggers, fmt.Sprintf(`DROP TRIGGER IF EXISTS %s ON %s`, name, t))
	}
	// Statement triggers with transition tables: one row of deltas per statement, however many
	// rows it changed. Parking is a row trigger on the parking reason alone, and a new due time
	// one on the due time alone, so claims, which update other columns, fire nothing. (A
	// trigger with a column list cannot have transition tables: Reschedule changes one row.)
	c.createTriggers = []string{
		fmt.Sprintf(`CREATE TRIGGER %s AFTER INSERT ON %s REFERENCING NEW TABLE AS changed
	FOR EACH STATEMENT EXECUTE FUNCTION %s()`, countTriggers[0], t, c.fn),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER DELETE ON %s REFERENCING OLD TABLE AS changed
	FOR EACH STATEMENT EXECUTE FUNCTION %s()`, countTriggers[1], t, c.fn),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER UPDATE OF parked_reason ON %s FOR EACH ROW
	WHEN ((OLD.parked_reason IS NULL) <> (NEW.parked_reason IS NULL)) EXECUTE FUNCTION %s()`, countTriggers[2], t, c.fn),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s()`, countTriggers[3], t, c.fn),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER UPDATE OF due ON %s FOR EACH ROW
	WHEN (OLD.due IS DISTINCT FROM NEW.due AND OLD.parked_reason IS NULL AND NEW.parked_reason IS NULL)
	EXECUTE FUNCTION %s()`, countTriggers[4], t, c.fn),
	}
	// Writers wait while the counts start from the table as it is; readers do not.
	c.lockTimeouts = fmt.Sprintf(`LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE`, t)
	c.reset = []string{fmt.Sprintf(`DELETE FROM %s`, c.table), fmt.Sprintf(`INSERT INTO %s (destination, pending, parked)
SELECT destination, count(*), count(parked_reason) FROM %s GROUP BY destination`, c.table, t),
		fmt.Sprintf(`DELETE FROM %s`, c.dues), fmt.Sprintf(`INSERT INTO %s (bucket, n, folded)
SELECT %s, count(*), true FROM %s WHERE parked_reason IS NULL GROUP BY 1`, c.dues, minute("due"), t),
		fmt.Sprintf(`DELETE FROM %s`, c.ownerDeltas), fmt.Sprintf(`DELETE FROM %s`, c.owners),
		fmt.Sprintf(`INSERT INTO %s (owner, n) SELECT owner, count(*) FROM %s GROUP BY owner`, c.owners, t)}
	// Few rows are parked, and parking is rare: the index costs stores and claims nothing. A
	// claimed row enters the claimed index at its claim, which already writes every index.
	c.createParkedIndex = fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (due, id) WHERE parked_reason IS NOT NULL`,
		quoteIdent(indexName(table, "parked")), t)
	c.createClaimedIndex = fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (available_at)
WHERE available_at <> due AND parked_reason IS NULL`, quoteIdent(indexName(table, "claimed")), t)
	// DueNow = the dues of the minutes before now's ($2) + those due in now's minute up to now
	// ($1) - the parked among them. Each WHERE on the timeouts matches an index.
	c.stats = fmt.Sprintf(`SELECT n.due, n.claimed, n.earliest, n.latest, c.destination, c.pending, c.parked
FROM (SELECT
	((SELECT COALESCE(sum(n), 0) FROM %[3]s WHERE bucket < %[4]s)
	+ (SELECT count(*) FROM %[1]s WHERE due >= %[4]s AND due <= $1)
	- (SELECT count(*) FROM %[1]s WHERE parked_reason IS NOT NULL AND due >= %[4]s AND due <= $1))::bigint AS due,
	(SELECT count(*) FROM %[1]s WHERE available_at <> due AND parked_reason IS NULL AND available_at > $1) AS claimed,
	(SELECT min(due) FROM %[1]s) AS earliest,
	(SELECT max(due) FROM %[1]s) AS latest) AS n
LEFT JOIN (SELECT destination, sum(pending) AS pending, sum(parked) AS parked FROM %[2]s
	GROUP BY destination HAVING sum(pending) <> 0) AS c ON true`, t, c.table, c.dues, "$2::timestamptz")
	// CountDue's statement. $1 are the bounds, sorted, and $2 the minutes they fall in: the
	// first rows sum the dues of the minutes before each bound's (width_bucket b: those before
	// the minute of bound b, 0-based, and not before the one of bound b-1); the others count,
	// for each bound, the timeouts due in its minute before it, less the parked ones, in the
	// (due, id) index and the parked timeouts' partial index.
	c.due = fmt.Sprintf(`SELECT width_bucket(bucket, $2::timestamptz[]), sum(n)::bigint, false FROM %[2]s
WHERE bucket < (SELECT max(m) FROM unnest($2::timestamptz[]) AS m) GROUP BY 1
UNION ALL
SELECT (u.i - 1)::int, (SELECT count(*) FROM %[1]s WHERE due >= u.m AND due < u.x)
	- (SELECT count(*) FROM %[1]s WHERE parked_reason IS NOT NULL AND due >= u.m AND due < u.x), true
FROM unnest($1::timestamptz[], $2::timestamptz[]) WITH ORDINALITY AS u(x, m, i)`, t, c.dues)
	c.ownerDeltasRead = fmt.Sprintf(`SELECT owner, sum(n)::bigint FROM %s GROUP BY owner HAVING sum(n) <> 0`, c.ownerDeltas)
	c.topOwners = fmt.Sprintf(`SELECT owner, n FROM %s ORDER BY n DESC, owner LIMIT $1`, c.owners)
	c.ownersOf = fmt.Sprintf(`SELECT owner, n FROM %s WHERE owner = ANY($1::text[])`, c.owners)
	c.total = fmt.Sprintf(`SELECT COALESCE(sum(pending), 0), COALESCE(sum(parked), 0) FROM %s`, c.table)
	return c
}

// dollarQuote quotes body as a dollar-quoted string whose tag body does not contain.
func dollarQuote(body string) string {
	tag := "$count$"
	for i := 0; strings.Contains(body, tag); i++ {
		tag = fmt.Sprintf("$count%d$", i)
	}
	return tag + "\n" + body + "\n" + tag
}

// installCounts creates the counts, their triggers and indexes in tx, which holds set-up's lock,
// unless the triggers exist already. The counts start from the table as it is, with its writers
// kept waiting until tx commits, so that no change is counted twice or missed.
func (c counts) installCounts(ctx context.Context, tx *sql.Tx, table string) error {
	var (
		triggers   int
		ownersMade bool
	)
	if err := tx.QueryRowContext(ctx, `SELECT count(*), to_regclass($3) IS NOT NULL FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = ANY($2)`,
		table, countTriggers, c.owners).Scan(&triggers, &ownersMade); err != nil {
		return err
	}
	stmts := []string{c.createParkedIndex, c.createClaimedIndex, c.createTable, c.grantRead, c.createDues, c.grantReadDues,
		c.createOwnerDeltas, c.createOwners, c.createOwnersIndex}
	stmts = append(stmts, c.grantReadOwners...)
	stmts = append(stmts, c.createFunction)
	// Counts made before the owners' table start again from the table, the owners with them.
	if triggers != len(countTriggers) || !ownersMade {
		stmts = append(stmts, c.lockTimeouts)
		stmts = append(stmts, c.dropTriggers...)
		stmts = append(stmts, c.createTriggers...)
		stmts = append(stmts, c.reset...)
	}
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// installed is the condition, on $1 the table, that the counts and their indexes exist.
func (c counts) installed() string {
	return fmt.Sprintf(`to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL
	AND to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL
	AND (SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname IN ('%s')) = %d`,
		quoteLiteral(c.table), quoteLiteral(c.parkedIndex), quoteLiteral(c.claimedIndex), quoteLiteral(c.dues),
		quoteLiteral(c.owners), quoteLiteral(c.ownerDeltas),
		strings.Join(countTriggers, "', '"), len(countTriggers))
}

// quoteLiteral quotes s as a PostgreSQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Count returns Stats' Pending and Parked alone, from the counts: its cost does not grow with
// the table, nor with how many timeouts are due (persistence.Counter).
func (s *Store) Count(ctx context.Context) (pending, parked int, err error) {
	if err := sqlstore.Opened(s.c()); err != nil {
		return 0, 0, err
	}
	db := sqlstore.DB(s.core)
	if err := fold(ctx, db, s.q.counts.foldCounts); err != nil {
		return 0, 0, fmt.Errorf("postgres: count: %w", err)
	}
	if err := db.QueryRowContext(ctx, s.q.counts.total).Scan(&pending, &parked); err != nil {
		return 0, 0, fmt.Errorf("postgres: count: %w", notSetUp(err))
	}
	return pending, parked, nil
}

// foldFresh is how long after a fold of everything on this store CountDue reads without
// folding again: the dashboard's overview calls Stats, then CountDue, and each fold reads the
// whole dues table twice (a few milliseconds at tens of thousands of minutes). The counts are
// exact folded or not; a fold only keeps them short.
const foldFresh = time.Second

// foldOn folds the counts, the dues and the owners on db unless another call is folding them.
func (c counts) foldOn(ctx context.Context, db *sql.DB) error {
	start := time.Now()
	if err := fold(ctx, db, c.fold); err != nil {
		return err
	}
	c.folded.Store(start.UnixNano())
	return nil
}

// foldUnlessFresh is foldOn, unless a fold of everything began on this store within foldFresh.
func (c counts) foldUnlessFresh(ctx context.Context, db *sql.DB) error {
	if time.Since(time.Unix(0, c.folded.Load())) < foldFresh {
		return nil
	}
	return c.foldOn(ctx, db)
}

// fold runs statement, a fold, on db. A fold that fails, on a standby or without the right to
// write, leaves the counts as exact, only longer to sum: only a cancelled ctx is an error.
func fold(ctx context.Context, db *sql.DB, statement string) error {
	if _, err := db.ExecContext(ctx, statement); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// notSetUp wraps err, when it says the counts' table is missing, with persistence.ErrNotSetUp.
func notSetUp(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w (%w: SetupInfrastructure adds the counts to a table an older version made)", err, persistence.ErrNotSetUp)
	}
	return err
}

// indexesOnly makes the planner of its transaction read the indexes Stats' statement is written
// for. From the table's statistics it reckons nearly every row claimed (available_at <> due
// holds for most rows by its estimate, and available_at > now for all not yet due), so it would
// read the whole table, and compile the plan (JIT) for that cost; and a bitmap scan of the
// claimed index visits the table for every entry of a claim that ended, where an index scan
// marks them dead for the next Stats.
const indexesOnly = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('jit', 'off', true)`

// read is Dialect.Stats on db: it folds the counts, then reads every number in one statement.
func (c counts) read(ctx context.Context, db *sql.DB, now time.Time) (persistence.Stats, error) {
	if err := c.foldOn(ctx, db); err != nil {
		return persistence.Stats{}, fmt.Errorf("postgres: stats: %w", err)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return persistence.Stats{}, fmt.Errorf("postgres: stats: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only: nothing to keep
	if _, err := tx.ExecContext(ctx, indexesOnly); err != nil {
		return persistence.Stats{}, fmt.Errorf("postgres: stats: %w", err)
	}
	// now's minute, as the triggers truncate due times (in UTC), made here rather than in the
	// statement, where it would be made again for every row of the dues.
	rows, err := tx.QueryContext(ctx, c.stats, now, now.UTC().Truncate(time.Minute))
	if err != nil {
		return persistence.Stats{}, fmt.Errorf("postgres: stats: %w", notSetUp(err))
	}
	defer rows.Close()
	st := persistence.Stats{ByDestination: map[string]int{}}
	for rows.Next() {
		var (
			earliest, latest sql.NullTime
			destination      sql.NullString
			pending, parked  sql.NullInt64
			due, claimed     int
		)
		if err := rows.Scan(&due, &claimed, &earliest, &latest, &destination, &pending, &parked); err != nil {
			return persistence.Stats{}, fmt.Errorf("postgres: stats: %w", err)
		}
		st.DueNow, st.Claimed = due, claimed
		if earliest.Valid {
			st.Earliest, st.Latest = earliest.Time.UTC(), latest.Time.UTC()
		}
		if destination.Valid {
			st.ByDestination[destination.String] = int(pending.Int64)
			st.Pending += int(pending.Int64)
			st.Parked += int(parked.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return persistence.Stats{}, fmt.Errorf("postgres: stats: %w", err)
	}
	return st, nil
}
