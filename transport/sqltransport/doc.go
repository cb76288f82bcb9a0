// Package sqltransport runs timeoutmill over SQL tables: a Watermill Publisher and Subscriber
// built on watermill-sql v4, on PostgreSQL or on MariaDB/MySQL, with queue semantics, and the
// exactly-once forwarder for a transport that shares its PostgreSQL database with the store.
//
//	pub, sub, err := sqltransport.New(ctx, sqltransport.Config{
//		Dialect: sqltransport.PostgreSQL,
//		DSN:     "postgres://app:secret@db.internal:5432/app",
//	}, logger)
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	defer sub.Close()
//	forwarder, err := sqltransport.NewExactlyOnceForwarder(ctx, pub, store, logger) // optional
//	manager, err := timeouts.NewManager(timeouts.Config{
//		Endpoint: "orders", Store: store, Publisher: pub, Subscriber: sub, Forwarder: forwarder,
//	}, logger)
//
// # Queues
//
// Every topic is a table, named Config.TablePrefix + topic ("watermill_orders.Timeouts"), that
// is created when first published to or subscribed to. Each row is one message: Publish inserts
// rows, and a consumer takes the oldest rows no other consumer holds, up to Config.BatchSize, in
// a READ COMMITTED transaction with FOR UPDATE SKIP LOCKED, hands them out, and ends the acked
// ones in that transaction. So every message reaches one consumer, however many instances of an
// endpoint consume its Timeouts and TimeoutsDispatcher queues, competing instances share a
// backlog without waiting for each other, and tables hold only what is waiting.
//
// With Config.Consumers 1 (the default) a consumer hands its batch out one message at a time,
// each once the previous was acked, so a topic is handled in table order. With more, order is
// not kept anyway, and each consumer hands out its whole batch at once: a router then handles up
// to Consumers × BatchSize messages of the topic at the same moment, and a batch costs one
// transaction and one commit however long its messages take. The timeout manager's satellites
// gather the messages they handle at the same moment into one store call (the dispatch satellite
// into one exactly-once transaction), so this is what lets a backlog drain in batches.
//
// On PostgreSQL acked rows are deleted in the batch's transaction. On MariaDB they are marked
// acked, and each subscription deletes acked rows below the oldest unacked one every second:
// MariaDB 10.11 deadlocks when consumers delete rows while others take rows with SKIP LOCKED
// (reproduced with plain SQL, several deadlocks per few hundred rows), and each deadlock rolls
// back a batch whose messages were handled already, which would deliver them twice.
//
// watermill-sql's own consumer groups were the other way to get there, and were not taken: its
// PostgreSQL offsets adapter locks the group's one offsets row for the whole of every batch, so
// competing consumers take turns rather than share the work; rows are kept after they were read,
// so tables only grow; and its PostgreSQL schema hides every row newer than the oldest
// transaction running anywhere on the server (pg_snapshot_xmin), which a consumer holding its
// batch open while handlers run is, so one slow handler delays every queue. Tried on v4.0.0:
// two subscribers of one group handled at most one message at a time between them; a message
// published to another topic waited for as long as a handler held a message; all rows stayed in
// the table after they were consumed; and a uuid longer than 36 characters cannot be published
// (VARCHAR(36)), which a producer that is not Watermill may well send.
//
// # Polling
//
// A consumer that finds its table empty looks again after Config.PollInterval, 100 ms by
// default, or at once when a Publisher in the same process commits rows to its topic: the
// Publisher and Subscriber that New returns share these wake-ups, as do a Publisher and the
// Subscribers made with Publisher.NewSubscriber, and an ExactlyOnceForwarder on that Publisher.
// A commit wakes one sleeping consumer, and a consumer that takes a full batch wakes the next, so
// a message published to idle consumers costs one transaction however many there are, and a
// backlog is still taken by all of them side by side. Rows written by other processes are found
// by polling. The poll is the topic's, not each consumer's: every PollInterval it wakes the
// consumer asleep the longest, so a topic costs one look an interval however many consumers sleep
// on it. A polling consumer's look is one short
// statement (is anything waiting?); the transaction that takes rows follows only when something
// is. A due timeout crosses two queues (TimeoutsDispatcher, then its destination), each of which
// may make it wait up to one interval when the producer is in another process, so it then
// arrives on average about one interval late, at worst two, plus the work; an idle instance
// (two queues) makes two short looks an interval. A shorter interval buys lateness with idle
// load, in proportion: 100 ms costs little and keeps delayed delivery within a few tenths of a
// second; 1 s, watermill-sql's own default, makes it a second late.
// acceptance/sql_measure_test.go measures both for several intervals. A queue with a backlog is
// read without waiting: a consumer looks again at once after a batch.
//
// # Exactly once
//
// NewExactlyOnceForwarder checks that the transport and the persistence/postgres store reach one
// PostgreSQL database, and refuses anything else with ErrExactlyOnceUnsupported, saying why.
// Its Forward deletes the timeout and inserts the message into its destination's table in one
// statement, so one transaction: committed together or not at all. ForwardMany does the same for
// the batch of due timeouts the dispatch satellite handles at one moment: one DELETE, one INSERT
// per destination, one commit, and only the messages of the timeouts it deleted are inserted, so
// a dispatcher message delivered twice, or two instances racing, still forward once. Elsewhere
// delivery is at least once: the dispatcher publishes, then removes, and a crash in between
// delivers the message again.
//
// Consuming stays at least once in both modes: a consumer's deletes commit when its batch ends,
// so a crash in the middle of a batch hands its messages out again. The timeout manager's
// satellites do not mind (storing is idempotent by message id; a dispatcher message whose timeout
// is gone is acked), and a destination's consumer sees each forwarded message as often as any
// other message of that queue.
//
// # Producers that are not Watermill
//
// Any program can send a delayed message with one INSERT, in the table's columns: uuid, payload
// and metadata, a JSON object of header strings with the two contract headers:
//
//	INSERT INTO "watermill_orders.Timeouts" (uuid, payload, metadata)
//	VALUES ('b7c1…', '\x7b7d', '{"timeout.expire":"2030-01-01T00:00:00Z","timeout.destination":"payments"}');
//
// Header values that are JSON numbers, booleans or objects arrive as their JSON text, null as "".
// Metadata that is not a JSON object still makes a message, with InvalidMetadataHeader set, so a
// bad row can never block its queue. Header values must be valid UTF-8: JSON cannot carry other
// bytes, and encoding/json replaces them with U+FFFD.
//
// # Connections
//
// New opens two pools: the Publisher's (Config.MaxOpenConns) and the Subscriber's, which holds
// one connection per running consumer and no more, plus one per recoverability deferred queue it
// consumes, which holds the lock that keeps the queue to one consumer. They are separate so that
// consumers holding connections while handlers run can never leave a handler without one.
//
// # Stability
//
// This package's API is stable. While timeoutmill is at v0, an incompatible change to it is made
// only with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in
// a new major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md). The queue tables are
// watermill-sql's and this package's own, not an API.
package sqltransport
