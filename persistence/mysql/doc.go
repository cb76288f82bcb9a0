// Package mysql is the persistence.Store on MariaDB (10.6 or later) and MySQL (8.0 or later):
// timeouts in one InnoDB table, shared safely by any number of endpoint instances, through
// database/sql and github.com/go-sql-driver/mysql.
//
//	store, err := mysql.Open(ctx, mysql.Config{
//		DSN:      "timeoutmill:secret@tcp(db.internal:3306)/app",
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
// The table defaults to `orders.timeouts` (the NServiceBus name) in the DSN's database. Table
// names are validated and always quoted with backticks, so any name MariaDB can hold is safe and
// none is pasted into SQL raw. SetupInfrastructure creates the table when it is missing; when it
// exists it only looks, so a user without the right to create tables can run a store a DBA set
// up.
//
// A claim is one short READ COMMITTED transaction: the earliest claimable rows are locked with
// SELECT ... FOR UPDATE SKIP LOCKED on the available_at index, then moved to the end of the
// lease, so concurrent pollers never wait for each other nor get the same timeout, and a lost
// claim is recovered when its lease runs out. No watermark is kept, so a timeout committed late
// is still found (NServiceBus#3500). All times come from the caller (ClaimDue's now), never from
// the database clock.
//
// The satellites store, look up and remove many timeouts at once with StoreMany, PeekMany and
// RemoveMany (persistence.BatchStore): each is one READ COMMITTED transaction and one commit, with
// one statement per 500 ids (and per 4 MiB of inserted rows). MySQL has neither INSERT nor
// DELETE ... RETURNING, so StoreMany first reads which ids are stored and RemoveMany locks the
// rows it will delete; both work in id order, so that overlapping batches wait for each other
// rather than deadlock.
//
// Due times are kept as UTC DATETIME(6), to the microsecond (rounded up, so nothing is delivered
// early), between the years 1000 and 9999. Times are sent and read as text, so the DSN's
// parseTime and loc and the session's time_zone change nothing. Ids, destinations and owners are
// binary strings (compared byte for byte, case and trailing spaces included), payloads and
// headers are kept byte for byte (headers in persistence.EncodeMetadata's format). A payload
// must fit in the server's max_allowed_packet (16 MiB by default on MariaDB).
//
// A claim or Hide that InnoDB chose as a deadlock victim is run again. MySQL has no DELETE ...
// RETURNING, so RemoveMany first locks the rows it finds, in id order as every batch call takes
// them, and deletes exactly those. The owner index holds the first 255 bytes of owners; an empty
// owner cancels nothing: it means "no owner".
//
// Deduplication keys are a VARBINARY(250) column under a unique index (NULL, for none, never
// collides); SetupInfrastructure adds it to a table an older version created. A Schedule with a
// key holds a named lock on the key (GET_LOCK) around its READ COMMITTED transaction, so that
// Schedules of one key take turns instead of deadlocking on the unique index, and is run again
// when InnoDB chose it as a deadlock victim. ScheduleTx runs in the caller's transaction, which
// a session lock cannot follow: it reads the key's holder with locking reads (current even at
// REPEATABLE READ), and a deadlock is returned for the caller to roll back and run again.
//
// Use New to run the store on a *sql.DB of your own opened with the "mysql" driver; any DSN
// options work.
//
// Parked timeouts (persistence.Parker) keep their row: parked_reason holds the reason and
// available_at moves to persistence.MaxDue, beyond every claim, so the claim and its index are
// unchanged; Next may return MaxDue while only parked timeouts are stored. Claims record the
// instance of ClaimDueAs in claimed_by, in the claim's own UPDATE (ClaimDue and Hide set it to
// NULL), under an index, so that ReleaseClaimsOf (at a manager's start, and after a claim whose
// answer was lost) reads only the rows the instance claimed. HoldInstance holds the name with GET_LOCK(name, 0) on a connection of its own;
// lock names are server-wide and at most 64 characters, so the name is the SHA-256 (hex) of the
// database, the table and the instance. The connection is pinged every 5 seconds, so that
// wait_timeout never ends it and a lost hold is taken again soon; release unlocks and closes it,
// and Close releases every hold. If the connection dies, the server ends the session and the
// lock with it: the store takes the lock again at the next ping it can, and meanwhile another
// process could take the name and release this one's claims, which only makes them claimable
// again (a possible duplicate, never a loss). SetupInfrastructure adds both columns, nullable, to a table an older version made;
// until it has, CheckInfrastructure reports the table as not set up.
//
// Open dials with a dialer of the store's own (no dial function registered with the driver):
// TCP keepalive and TCP_USER_TIMEOUT end a connection to a server that vanished without closing
// it within about 15 seconds. The DSN may tune them with libpq's setting names, keepalives,
// keepalives_idle, keepalives_interval, keepalives_count and tcp_user_timeout, which Open takes
// out of the DSN's parameters rather than send them to the server.
//
// # Stability
//
// The store's API is stable. While timeoutmill is at v0, an incompatible change to it is made only
// with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in a new
// major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md). Its table layout is the
// store's own: set-up brings a table an older version made up to date; read the timeouts through
// persistence.Inspector or the timeoutmill command, not with SQL of your own.
package mysql
