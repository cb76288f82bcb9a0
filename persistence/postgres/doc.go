// Package postgres is the persistence.Store on PostgreSQL: timeouts in two tables, shared safely
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
// The table defaults to "public"."orders.timeouts" (the NServiceBus name), and the timeouts a
// poller has claimed live in "public"."orders.timeouts_claimed" beside it. Schema and table names
// are validated and always quoted, so any name is safe and none is pasted into SQL raw.
// SetupInfrastructure creates the schema, the tables and their indexes when they are missing,
// under an advisory lock so that instances starting together do not race; when they all exist it
// only looks, so a user without the right to create tables can run a store a DBA set up (grant
// SELECT, INSERT, UPDATE and DELETE on both tables).
//
// Each claim is one statement: the due rows are picked earliest first with FOR UPDATE SKIP
// LOCKED and moved to the claimed table until the end of the lease, so concurrent pollers never
// wait for each other nor get the same timeout, and a lost claim is recovered when its lease runs
// out (the claimed row is claimed again in place). Moving a row writes index entries only into
// the claimed table, which holds what is in flight and stays in memory, where updating it in place
// wrote a new entry into the big table's primary key at a random page: at a million pending a
// claim of 500 took 6.2–8.0 ms in place and takes 3.9–4.6 ms moved (the empty store: 3.7–4.2
// against 4.2–4.6 ms). The dispatcher then peeks and removes in the small table too. A store
// checks, in a second statement pipelined with its insert, that no claim has moved its id, so a
// redelivered timeout is never stored twice. No watermark is kept, so a timeout committed late
// is still found (NServiceBus#3500). All times come from the caller (ClaimDue's now), never from
// the database clock. A claim commits with synchronous_commit = off for its own transaction: a
// database crash may forget the last moments' claims, which only makes those timeouts claimable
// again at once (a possible duplicate announcement, never a loss); stores, removals and Hide
// commit durably as the session says.
//
// Upgrading from the one-table layout of earlier versions needs no migration: the table is kept,
// SetupInfrastructure adds the claimed table, and timeouts the old version had claimed in place
// are claimed again when their lease runs out. Stop the old instances before starting new ones:
// an old instance does not look in the claimed table, so a dispatch message it takes for a timeout
// a new instance claimed finds nothing, and that timeout waits for its lease (Config.ClaimLease of
// the timeouts package) to be announced again. To go back to an old version, move the claimed
// timeouts back first:
//
//	INSERT INTO "orders.timeouts" SELECT * FROM "orders.timeouts_claimed";
//	DROP TABLE "orders.timeouts_claimed";
//
// Due times are kept as timestamptz, to the microsecond (rounded up, so nothing is delivered
// early); payloads and headers byte for byte (bytea; headers in persistence.EncodeMetadata's
// format). Ids, destinations and owners are text: they must be valid UTF-8 without NUL bytes, or
// Store returns persistence.ErrInvalidTimeout.
//
// Use New to run the store on a *sql.DB of your own (opened with the "pgx" driver, or with
// stdlib.OpenDBFromPool on a pgxpool.Pool). pgx prepares and caches statements per connection;
// behind PgBouncer in transaction mode, add default_query_exec_mode=simple_protocol to the DSN.
package postgres
