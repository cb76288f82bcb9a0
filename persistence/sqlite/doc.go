// Package sqlite is the durable embedded persistence.Store: timeouts survive a restart of the
// process with no server to run, in one SQLite file, through the pure Go driver modernc.org/sqlite
// (no cgo).
//
//	store, err := sqlite.Open(ctx, sqlite.Config{Path: "timeouts.db", Endpoint: "orders"})
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//
// Open creates the file and the table ("orders.timeouts" here) when missing and puts the file in
// WAL mode. Every change is made by one goroutine on one connection, so goroutines of one process
// never wait in SQLite's busy handler (whose waits grow to seconds under load) nor fail with
// SQLITE_BUSY; other processes on the same file wait up to Config.BusyTimeout for SQLite's lock.
// Changes requested while a commit runs are committed together in one transaction (group
// commit), so many concurrent writers cost about one commit per group, not one each. Each claim
// is one UPDATE ... RETURNING statement, so two pollers never claim the same timeout while its
// lease runs.
//
// Durability follows Config.Synchronous. With NORMAL, the default, a commit is in the WAL before
// Store returns, so a crash or kill of the process loses nothing, but the last commits since the
// WAL was synced may be lost if the machine loses power or its operating system crashes; the
// database is never corrupted. With FULL every commit is synced to disk before it returns and
// nothing acknowledged is lost, at the cost of one fsync per Store, Claim and Remove.
//
// Open's store copies the WAL into the database file (a checkpoint) from a goroutine and a
// connection of its own, every 100 ms, with SQLite's automatic checkpoint off on the writer: no
// Store or ClaimDue waits for the copy and its fsyncs, which SQLite would otherwise run inside the
// commit that takes the WAL past 1000 pages. These checkpoints are PASSIVE: they take no lock the
// writer or the readers wait for, and the store syncs the database file after each. Under a
// steady stream of commits such a checkpoint never catches up with the last one, so once the WAL
// holds 16384 pages (64 MiB with 4 KiB pages) the writer copies the pages committed since,
// between two of its transactions, and the WAL starts over (a burst of writes to a large file
// can take it a few times past that first, while a checkpoint copies); a WAL that starts over is
// truncated to 64 MiB. New leaves checkpoints to the caller's pool, as SQLite makes them.
//
// ScheduleTx schedules a timeout inside a transaction of the caller's on the same file, so that
// it exists if and only if that transaction commits. Begin it on a *sql.DB of your own, the one
// you give New or one opened on Open's file, whose DSN has _txlock=immediate and a busy_timeout:
// the transaction then takes SQLite's write lock at BEGIN (a transaction that read first could
// not upgrade its stale snapshot and would fail with SQLITE_BUSY), and the store's writer waits
// for it, up to its busy timeout, rather than failing. Keep such transactions short: every change
// the store makes waits for them. On a pool of one connection, call no other method of the store
// while the transaction is open: the store's writer needs that connection.
//
// Timeouts are kept with microsecond due times (rounded up, so nothing is delivered early), their
// payload and headers byte for byte (headers in persistence.EncodeMetadata's format).
//
// Parked timeouts (persistence.Parker) keep their row: parked_reason holds the reason and
// available_at moves to persistence.MaxDue, beyond every claim; Next may return MaxDue while only
// parked timeouts are stored. Claims record the instance of ClaimDueAs in claimed_by, in the
// claim's own UPDATE, under a partial index of the rows a named instance claimed, so that
// ReleaseClaimsOf reads those rows alone. HoldInstance takes an exclusive
// flock on "<database>-instance-<hash>.lock" beside the database file (left in place), which the
// operating system releases when the process ends however it ends; a database in memory (New on
// a caller's pool) is held in the store only, and a platform without flock cannot hold a name.
// SetupInfrastructure (and Open) add both columns to a table an older version made; until then
// CheckInfrastructure, and Open with MustExist, report it not set up.
//
// List reads an index on due, so that a page costs the same at a million timeouts as at a few.
// SetupInfrastructure (and Open) add it to a table an older version made, once; the store's
// writes wait while it is built, longer the more timeouts the table holds. Until then List works,
// but every page sorts the whole table. Each Store writes to the index too: little when due times
// rise as timeouts are stored, a page of its own when they are scattered.
//
// The store has no clock of its own (it does not implement persistence.Clocked): the processes that
// share a database file run on one machine and read one clock, which decides when a timeout is due.
//
// # Stability
//
// The store's API is stable. While timeoutmill is at v0, an incompatible change to it is made only
// with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in a new
// major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md). Its table layout is the
// store's own: set-up brings a table an older version made up to date; read the timeouts through
// persistence.Inspector or the timeoutmill command, not with SQL of your own.
package sqlite
