// Package sqlserver is the persistence.Store on Microsoft SQL Server and Azure SQL Database:
// timeouts in one table, shared safely by any number of endpoint instances, through
// database/sql and github.com/microsoft/go-mssqldb. It is the Go form of the SQL Server delayed
// message store that NServiceBus's MSMQ transport ships, and starts from that store's schema and
// T-SQL.
//
//	store, err := sqlserver.Open(ctx, sqlserver.Config{
//		DSN:      "sqlserver://timeoutmill:secret@db.internal:1433?database=app",
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
// The table defaults to [dbo].[orders.timeouts]: schema dbo and "<endpoint>.timeouts", as the
// seed's store names it. Schema and table names are validated and always bracketed (a ] inside
// is doubled), so any name SQL Server can hold is safe and none is pasted into SQL raw.
// SetupInfrastructure runs the seed's idempotent script (IF NOT EXISTS on sys.objects and
// sys.indexes) under an application lock, so that instances starting together do not race; when
// the table and its indexes exist it only looks, so a login without the right to create tables
// can run a store a DBA set up with the script SetupScript returns.
//
// # The table, and how it differs from the seed's
//
// The seed creates
//
//	Id nvarchar(250) not null primary key, Destination nvarchar(200), State varbinary(max),
//	Time datetime, Headers varbinary(max) not null, RetryCount INT NOT NULL default(0)
//
// with an index Index_Time on Time. This store keeps those columns and names (State holds the
// payload, Headers the metadata in persistence.EncodeMetadata's format, RetryCount the failure
// count) and changes only what timeoutmill needs:
//
//   - Time is datetime2(7), not datetime, and NOT NULL. datetime rounds to 1/300 s, so a
//     timeout could come back up to 3.33 ms early, and its range starts in 1753; the store keeps
//     due times to the microsecond, rounded up so that nothing is delivered early.
//   - AvailableAt datetime2(7) NOT NULL, indexed (Index_AvailableAt), is new: when a row can
//     next be claimed, its due time until it is claimed and then the end of the claim's lease.
//     The seed locks a row only while its transaction runs; timeoutmill hands claimed ids to a
//     dispatcher queue, so a claim must outlive the statement, and a lost one must come back
//     when its lease runs out.
//   - Owner nvarchar(250) NOT NULL, empty by default, indexed (Index_Owner), is new: it groups
//     timeouts for CancelByOwner.
//   - DedupKey nvarchar(250) NULL (BIN2, as Id), under a filtered unique index (Index_DedupKey,
//     WHERE DedupKey IS NOT NULL), is new: the deduplication key of Schedule, NULL for none.
//     SetupInfrastructure adds it to a table an older version created. A table with a filtered
//     index can be changed only by sessions with ANSI_NULLS and QUOTED_IDENTIFIER ON, the
//     defaults of go-mssqldb; a login whose user options turn them off fails with error 1934.
//   - Destination is nvarchar(250), not nvarchar(200), and NOT NULL: a destination as long as
//     an id fits, and a timeout without one cannot be delivered.
//   - Id and Owner are COLLATE Latin1_General_100_BIN2: they compare code point by code point
//     whatever the database's collation. Under a case-insensitive one, the ids "A" and "a" would
//     be one and the second timeout would be dropped as a duplicate.
//
// # Claims
//
// ClaimDue is one statement, in the seed's manner: the earliest claimable rows are read through
// Index_AvailableAt WITH (READPAST, UPDLOCK, ROWLOCK) and their AvailableAt is moved to the end
// of the lease (OUTPUT returns their ids), so concurrent pollers never wait for each other nor
// get the same timeout. As in the seed, whose FetchNextDueTimeout compares with the time it is
// given, all times come from the caller (ClaimDue's now), never from GETUTCDATE(). No watermark
// is kept, so a timeout committed late is still found (NServiceBus#3500). Because claims use
// OUTPUT without INTO, the table must have no triggers.
//
// # Batches
//
// The satellites store, look up and remove many timeouts at once with StoreMany, PeekMany and
// RemoveMany (persistence.BatchStore), below the 2,100 parameters a request may carry: StoreMany
// sends 250 timeouts per statement (Store's insert guarded by NOT EXISTS, over a table value
// constructor, OUTPUT returning the ids it inserted), PeekMany and RemoveMany 500 ids (RemoveMany
// with OUTPUT deleted.Id). Batches of more than one statement run in one transaction and one
// commit, and again when SQL Server chose them as a deadlock victim (1205). A StoreMany
// statement that meets the primary key (another caller stored one of its ids since NOT EXISTS
// looked) is run again, and finds that id stored; this relies on SET XACT_ABORT OFF, the
// default, under which such an error undoes the statement alone. Ids no timeout can have (see
// Values) are looked up and removed in no statement.
//
// # Values
//
// Times are kept as datetime2 in UTC. They travel as datetimeoffset at +00:00, which the driver
// writes and reads as instants, so the DSN's timezone setting changes nothing (as datetime2 they
// would travel as wall clocks in that zone, and the hour a daylight saving zone skips has none).
// Due times must fall in datetime2's years 1 to 9999. Payloads and headers are kept byte for
// byte. Ids, destinations and owners are nvarchar: they must be valid UTF-8 of at most 250 UTF-16
// code units, and ids and owners must not end with a space, which SQL Server ignores when it
// compares strings ("a " would be the id "a"); Store returns persistence.ErrInvalidTimeout
// otherwise. Store is idempotent by id: an insert guarded by NOT EXISTS, and a duplicate key
// (errors 2627, 2601) from two Stores of a new id at once read as "stored already". Counts come
// from @@ROWCOUNT, so SET NOCOUNT ON in the server's user options changes nothing.
//
// # Schedule
//
// Schedule and ScheduleTx read the key's holder WITH (UPDLOCK, HOLDLOCK), so that Schedules of
// one key take turns even while no row holds it, and insert with Store's guard on the key too.
// In the caller's transaction, a deadlock (1205) is returned for the caller to run its
// transaction again; a duplicate key is not an error and leaves the transaction usable under
// XACT_ABORT OFF, the default.
//
// # Parking and instances
//
// Parked timeouts (persistence.Parker) keep their row: ParkedReason (nvarchar(2000), which holds
// any reason of persistence.MaxParkReasonLength bytes) holds the reason and AvailableAt moves to
// persistence.MaxDue, beyond every claim; Next may return MaxDue while only parked timeouts are
// stored. The claim sets ClaimedBy to the instance of ClaimDueAs in its own UPDATE (NULL for
// ClaimDue), under an index filtered to the rows a named instance claimed, so that
// ReleaseClaimsOf (at a manager's start, and after a claim whose answer was lost) reads those
// rows alone. HoldInstance takes sp_getapplock with @LockOwner = 'Session' and no wait on a
// connection of its own (application locks are per database; the resource is a SHA-256 of the
// table and the instance), pinged every 5 seconds; release gives the lock back and closes the
// connection, and Close releases every hold. If the connection dies, SQL Server ends the session
// and the lock with it: the store takes the lock again at the next ping it can, and meanwhile
// another process could take the name and release this one's claims, which only makes them
// claimable again (a possible duplicate, never a loss). SetupInfrastructure adds both columns to
// a table an older version made; until then CheckInfrastructure reports it not set up.
//
// Use New to run the store on a *sql.DB of your own opened with the "sqlserver" driver.
//
// # Stability
//
// The store's API is stable. While timeoutmill is at v0, an incompatible change to it is made only
// with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in a new
// major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md). Its table layout is the
// store's own: set-up brings a table an older version made up to date; read the timeouts through
// persistence.Inspector or the timeoutmill command, not with SQL of your own.
package sqlserver
