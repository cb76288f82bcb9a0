// Package postgres is the persistence.Store on PostgreSQL: timeouts in one table, shared safely
// by any number of endpoint instances, through database/sql and the pgx driver
// (github.com/jackc/pgx/v5/stdlib).
//
//	store, err := postgres.Open(ctx, postgres.Config{
//		DSN:      "postgres://timeoutmill@db.internal/app",
//		Endpoint: "orders",
//	})
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//	if err := store.SetupInfrastructure(ctx); err != nil { // timeouts.Manager does this too
//		return err
//	}
//
// The table defaults to "public"."orders.timeouts" (the NServiceBus name). Schema and table
// names are validated and always quoted, so any name is safe and none is pasted into SQL raw.
// SetupInfrastructure creates the schema, the table and its indexes when they are missing, under
// an advisory lock so that instances starting together do not race; when they all exist it only
// looks, so a user without the right to create tables can run a store a DBA set up.
//
// Each claim is one statement: the due rows are picked earliest first with FOR UPDATE SKIP
// LOCKED and their available_at is moved to the end of the lease, so concurrent pollers never
// wait for each other nor get the same timeout, and a lost claim is recovered when its lease runs
// out. No watermark is kept, so a timeout committed late is still found (NServiceBus#3500). All
// times come from the caller (ClaimDue's now), never from the database clock. A claim commits with
// synchronous_commit = off for its own transaction: a database crash may forget the last moments'
// claims, which only makes those timeouts claimable again at once (a possible duplicate
// announcement, never a loss); stores, removals and Hide commit durably as the session says.
//
// Due times are kept as timestamptz, to the microsecond (rounded up, so nothing is delivered
// early); payloads and headers byte for byte (bytea; headers in persistence.EncodeMetadata's
// format). Ids, destinations and owners are text: they must be valid UTF-8 without NUL bytes, or
// Store returns persistence.ErrInvalidTimeout.
//
// The owner index (CancelByOwner) is a partial hash index; an empty owner cancels nothing: it
// means "no owner". Survey reads the whole table: it is for operators, not for a poll loop.
//
// Stats reads no more than it counts, so that metrics scrapes cost the same at ten million
// pending as at ten, and every number it returns is exact. Pending, Parked and ByDestination
// come from a table of counts next to the timeouts' ("orders.timeouts_counts"), which triggers
// on the timeouts table keep in the transactions that change it: each statement that inserts,
// deletes, parks or unparks timeouts appends one row of deltas per destination (concurrent
// writers append, never update one row, so they do not wait for each other), a rollback takes
// its rows back with it, and Stats, and now and then an insert, fold them into one row per
// destination. DueNow sums a second small table ("orders.timeouts_dues") of how many timeouts
// not parked are due in each minute (in UTC), kept by the same triggers and folded by the same
// calls, over the minutes before now's, and counts the rest of now's minute in the (due, id)
// index, less the parked ones there (a partial index of the parked timeouts). Claimed counts a
// partial index of the claimed timeouts (as many entries as pollers hold). Earliest and Latest
// are the ends of the (due, id) index. The trigger function runs as its owner (SECURITY DEFINER, with a fixed
// search_path), so a role granted only the timeouts table changes the counts with it, and every
// role may read the counts, as it may read the table's size in the catalog.
//
// CountOwners (persistence.OwnerCounter, the dashboard's owners) reads the pending timeouts per
// owner that the same triggers keep: each statement that inserts or deletes timeouts appends one
// row per owner to "orders.timeouts_owner_deltas", a table without index, and the folds add them
// into "orders.timeouts_owners", one row per owner (and one for no owner, the empty string), keyed by
// owner and indexed by count. CountOwners reads the top owners by that index and the owners of
// the deltas not yet folded by the key, so its cost does not grow with the timeouts or the owners.
// An owner per saga makes the owners' table as long as the timeouts', with small rows; a store
// of 500 timeouts appends up to 500 delta rows, and a fold writes each into the owners' key and
// count index. Claims, parks and reschedules do not change owners, and fire nothing for them.
//
// Deduplication keys are a nullable column under a partial unique index. Schedule and
// ScheduleTx take a transaction-scoped advisory lock on the key, so that Schedules of one key
// take turns, and insert with ON CONFLICT DO NOTHING, so that a taken id or key never aborts the
// caller's transaction. At REPEATABLE READ or SERIALIZABLE, a caller's transaction that meets a
// concurrent Schedule may fail with a serialization error, to be run again. List reads an index
// on (due, id), so that a page costs what it returns whatever the table holds.
//
// Parked timeouts (persistence.Parker) keep their row: parked_reason holds the reason and
// available_at moves to persistence.MaxDue, beyond every claim, so the claim and its index are
// unchanged; Next may return MaxDue while only parked timeouts are stored. Claims record the
// instance of ClaimDueAs in claimed_by, in the claim's own statement (ClaimDue and Hide set it to
// NULL), under a partial index of the rows a named instance claimed, so that ReleaseClaimsOf (at
// a manager's start, and after a claim whose answer was lost) reads those rows alone.
// HoldInstance holds the name with a session advisory lock (pg_try_advisory_lock on 64 bits of a
// hash of the table and the name) on a connection of its own, which it pings every
// 5 seconds; release unlocks and closes that connection, and Close releases every hold. It never
// takes the lock on a standby. If the connection dies (or the server fails over to a standby,
// which never had the lock), the session and its lock are gone: the store takes the lock again,
// on the server the DSN then leads to, within seconds of reaching it, and meanwhile another
// process could take the name and release this one's claims, which only makes them claimable
// again (a possible duplicate, never a loss).
//
// Open gives the pool's connections TCP keepalive and TCP_USER_TIMEOUT, so that a connection to
// a server that vanished without closing it ends within about 15 seconds, and a connect_timeout
// of 10 seconds per host unless the DSN sets one. The DSN may tune them with libpq's settings
// keepalives, keepalives_idle, keepalives_interval, keepalives_count and tcp_user_timeout. A DSN
// may list several hosts (postgres://user@host1:5432,host2:5432/db?target_session_attrs=read-write):
// each connection goes to the first that answers as a primary.
// SetupInfrastructure adds both columns, nullable, to a table an older version made (no rewrite);
// until it has, CheckInfrastructure reports the table as not set up. It adds the counts, the
// dues, the owners, their triggers and the two partial indexes the same way: they start from one full count
// of the table, with its writers waiting for it, and until then Stats fails with
// persistence.ErrNotSetUp.
//
// Use New to run the store on a *sql.DB of your own (opened with the "pgx" driver, or with
// stdlib.OpenDBFromPool on a pgxpool.Pool). pgx prepares and caches statements per connection;
// behind PgBouncer in transaction mode, add default_query_exec_mode=simple_protocol to the DSN.
//
// # Stability
//
// The store's API is stable. While timeoutmill is at v0, an incompatible change to it is made only
// with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in a new
// major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md). Its table layout is the
// store's own: set-up brings a table an older version made up to date; read the timeouts through
// persistence.Inspector or the timeoutmill command, not with SQL of your own.
package postgres
