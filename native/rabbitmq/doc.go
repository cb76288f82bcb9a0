// Package rabbitmq delays messages in RabbitMQ itself, as NServiceBus.RabbitMQ v2 does, instead
// of storing them in a database until they are due: 28 delay levels, each a topic exchange and a
// queue whose messages wait 2^L seconds, route a message by the bits of its delay down to a
// delivery exchange, which routes it to its destination queue.
//
//	pub, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: "amqp://guest:guest@localhost:5672/"}, logger)
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	if err := pub.Setup(ctx); err != nil { // or `timeoutmill native setup` once
//		return err
//	}
//	msg := message.NewMessage(watermill.NewUUID(), payload)
//	timeouts.DeliverAfter(msg, 90*time.Minute)
//	err = pub.Publish("orders", msg) // arrives on queue "orders" in 90 minutes
//
// Consume destinations with amqptransport's Subscriber: the broker adds an x-death header to
// every message it dead-letters from level to level, which watermill-amqp's own marshaler cannot
// read; amqptransport's Subscriber drops it.
//
// # Topology
//
// With the default prefix "timeoutmill":
//
//	exchange timeoutmill.delay-level-L (L = 27..0), topic, durable
//	queue    timeoutmill.delay-level-L, durable, x-message-ttl 2^L s, dead-lettering to
//	         timeoutmill.delay-level-(L-1), level 0 to timeoutmill.delay-delivery
//	binding  queue L    to exchange L on "*." × (27-L) + "1.#"
//	binding  exchange L-1 to exchange L on "*." × (27-L) + "0.#"
//	binding  timeoutmill.delay-delivery to exchange 0 on "*." × 27 + "0.#"
//	exchange timeoutmill.delay-destinations, topic, durable, alternate exchange
//	         timeoutmill.delay-unroutable: the guard
//	exchange timeoutmill.delay-unroutable, fanout, durable, and the queue of that name bound to
//	         it: where a message waits whose destination queue is gone
//	binding  each destination queue Q to timeoutmill.delay-destinations on "*." × 28 + "Q", and
//	         timeoutmill.delay-destinations to timeoutmill.delay-delivery on the same key
//	queue    timeoutmill.delay-probes, bound like a destination, keeping nothing: where the
//	         probe messages of `timeoutmill native verify` end
//
// A message delayed by s seconds (rounded up, less a part of a second shorter than the
// microsecond due times are kept to: DeliverAfter(2*time.Second) takes 2 s, not 3) for queue Q
// gets the routing key of the 28 bits of
// s, most significant first, then Q ("0.0.….1.0.1.Q" for 5 s) and is published to the exchange of
// its highest set bit; at each level a bit of 1 makes it wait in that level's queue, a bit of 0
// passes it on at once. A delay of zero or less goes straight to the delivery exchange; one of
// more than 268,435,455 s (about 8.5 years) is refused. Each queue has one fixed TTL, so a message
// never waits behind a longer-lived one.
//
// The level queues are quorum queues with at-least-once dead-lettering (RabbitMQ 3.10 or later;
// x-dead-letter-strategy at-least-once needs x-overflow reject-publish): the broker moves an
// expired message to the next level with publisher confirms, so a broker restart cannot lose one
// in between, and a message whose destination binding is missing when it comes out of level 0 is
// kept there and retried rather than dropped. QueueType Classic gives classic durable queues for
// older brokers, which dead-letter at most once.
//
// # Throughput
//
// A message delayed by s seconds is dead-lettered once per set bit of s, and each time the broker
// routes it through the topic exchanges from that level down to the delivery exchange, on a
// 29-word key. On RabbitMQ 3.10 that routing is most of the broker's work when many messages fall
// due together, and each quorum level queue has one dead-letter worker process, which routes the
// messages leaving that level one after another. A backlog due at one instant therefore drains
// well below the rate of one quorum queue dead-lettering straight to the destination through the
// default exchange, and below that of two such queues in a row (make bench measures both beside
// it). Classic level queues dead-letter with the same routing and are not faster; they only give
// up the at-least-once move between levels.
//
// # Never a silent drop
//
// A missing destination binding makes RabbitMQ drop the message when it leaves the levels
// (NServiceBus.RabbitMQ#367). The Publisher therefore declares the destination queue (as
// amqptransport does) and binds it before its first message to that destination on each
// connection, publishes mandatory with publisher confirms, and fails Publish for a message the
// broker returns or refuses. Routing to the destination happens only when the message leaves the
// levels, so a queue deleted while messages wait for it cannot be seen at send time.
//
// # A deleted destination: the guard and the unroutable queue
//
// Such a message cannot be routed when it leaves the levels. Left to the broker, a quorum level
// would keep it in its dead-letter worker (the level it last waited in, invisible to consumers,
// retried every 3 minutes), and once 32 are held that level passes nothing on, for every
// destination (NServiceBus.RabbitMQ#1407). Destinations are therefore bound through the guard,
// timeoutmill.delay-destinations: when a queue is deleted its binding goes, the guard's binding
// to the delivery exchange stays, and the guard's alternate exchange sends the message to the
// queue timeoutmill.delay-unroutable, with its routing key (which names the destination) and
// headers: no level is blocked, nothing is lost. A message published at once for a queue deleted
// after its binding ends there too. `timeoutmill native unroutable list` counts them by
// destination; `timeoutmill native unroutable replay` delivers them to their queues once these
// exist again. `timeoutmill native verify` fails while any wait there.
//
// The delivery exchange is bound to the guard destination by destination, never on "#": a
// destination an earlier version bound straight to the delivery exchange would otherwise be sent
// each message and a copy of it to the unroutable queue. An exchange's alternate exchange cannot
// be added once it is declared, so this is also how `timeoutmill native setup` adds the guard to
// an earlier setup. Destinations move through it with a Publisher's first message to them, or
// `timeoutmill native setup --destination Q`; until then they are not guarded. `timeoutmill
// native verify` watches every level pass a probe on and names a level that is stuck; the
// messages an unguarded destination left held there are delivered at the broker's next attempt
// once its queue exists again and is bound: re-create it, then `timeoutmill native setup
// --destination Q`.
//
// Names of destinations end routing keys: at most 199 bytes, and no dot-separated word "*" or
// "#".
//
// # Destination bindings: where this departs from NServiceBus
//
// NServiceBus binds a destination queue Q to the delivery exchange on "#.Q". "#" matches any
// number of words, so that binding also matches the routing key of every destination whose name
// ends with ".Q": a queue "shipping" also received what was delayed for "sales.shipping". Every
// routing key starts with exactly 28 bit words, so this package binds on 28 "*" words and Q
// instead ("*.*. … *.shipping"), which matches Q's keys only; the routing keys, exchanges, queues
// and level bindings stay NServiceBus's. (It is also cheaper for the broker to match.)
//
// Infrastructure set up by an earlier version has the "#.Q" bindings, or destinations bound
// straight to the delivery exchange, and no guard. Upgrading is safe while messages wait, because
// routing to the destination happens when a message leaves the levels:
//
//   - Run `timeoutmill native setup` (Setup) first: it adds the guard and rebinds the probe
//     queue; `timeoutmill native verify` reports the missing guard, and the probe queue's "#."
//     binding, the mark of an earlier setup, until then. An upgraded Publisher refuses to bind a
//     destination (ErrTopology) while the guard is missing.
//   - The Publisher rebinds each destination before its first message to it (EnsureDestinations):
//     it adds the new bindings through the guard, then removes the old ones. While both exist, a
//     message matching both is delivered once.
//   - Destinations no upgraded Publisher sends to keep "#.Q", and with it the bug, until
//     `timeoutmill native setup --destination Q` rebinds them.
//   - A Publisher of an earlier version adds "#.Q" again on its next connection: upgrade every
//     sender.
//
// # Hybrid mode: the upgrade path from stored timeouts
//
// Native and stored delays work side by side, so endpoints move one at a time, without a
// stop:
//
//  1. Set up the delay infrastructure once: `timeoutmill native setup --transport amqp://…`,
//     and check it with `timeoutmill native verify` (exit 0 when every piece is right).
//  2. Switch a sender to native: publish delayed messages with this package's Publisher
//     instead of timeouts.Publisher. Its messages wait in the broker and arrive on the
//     destination queue; the receiving endpoint needs nothing new, even if it only runs the
//     timeout manager, as long as it consumes with amqptransport (which drops x-death).
//  3. Keep the endpoint's timeout manager running (timeouts.Manager, or `timeoutmill run`):
//     it goes on storing what senders not yet switched send to ENDPOINT.Timeouts, and
//     dispatching the timeouts it stored before the switch, until its store is empty.
//  4. Either wait for the store to drain, or move what it holds now: `timeoutmill migrate --to
//     rabbitmq-native --endpoint E --store DSN --transport amqp://…` (see Migration), while the
//     timeout manager keeps running.
//  5. Once no sender publishes to ENDPOINT.Timeouts any more and `timeoutmill stats` shows
//     "pending: 0", turn the timeout manager off. The ENDPOINT.Timeouts and
//     ENDPOINT.TimeoutsDispatcher queues and the store's table can then be deleted.
//
// Cancelling (timeouts.Manager.Cancel, `timeoutmill cancel`) works only on stored timeouts: a
// message delayed natively, or migrated, cannot be called back.
//
// # Migration
//
// `timeoutmill migrate --to rabbitmq-native` moves stored timeouts onto the native delay while
// timeout managers keep running on the store. It needs a store that implements
// persistence.Handover (memory, SQLite, PostgreSQL, MariaDB/MySQL).
//
// Preflight, before anything changes: the delay infrastructure passes Verify; every
// destination queue exists (a migration never creates one) and can end a routing key; the
// latest due time is within MaxDelay. --dry-run runs it alone. Problems stop the
// migration, unless --skip-unmigratable lets it leave the timeouts concerned
// in the store, for the timeout manager, and list each by id and reason.
//
// Then each worker repeats: Hide a batch (the timeout managers' pollers cannot claim it any
// more; timeouts a poller holds are left to it), send it through the levels with publisher
// confirms (a past-due timeout is delivered at once; one due in an hour waits an hour in the
// broker), and Remove the batch once the broker has confirmed it. A migration ends when Hide finds
// nothing left.
//
//   - Killed at any point (kill -9, a crash, a lost connection): the timeouts it hid and did not
//     remove stay hidden; running the same command again takes them over, after the others, and
//     sends them. Those of the batches in flight at the kill that the broker had already taken
//     arrive twice: at most --workers × --batch messages. Nothing is lost. Until a rerun, hidden
//     timeouts are out of the timeout managers' reach.
//   - Interrupted (SIGINT or SIGTERM, a context cancelled): no new batch starts; the batches in
//     flight get --finish-timeout (30 s) to be confirmed and removed; whatever was not confirmed is put back
//     for the timeout managers, so a later run or the managers deliver it. A message whose
//     confirm did not come in time may have been taken all the same and then arrives twice.
//   - A timeout a running manager dispatched while its lease ran out, or that was cancelled,
//     while the migration sent it, is counted as "gone" in its report: it may arrive twice.
//
// Messages keep their id (the message UUID), body and headers, so receivers that deduplicate by
// message id see any second copy as one.
//
// # Stability
//
// This package's API is stable, and so is the topology it declares on the broker, which NServiceBus
// endpoints share. While timeoutmill is at v0, an incompatible change to it is made only with an
// entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in a new major
// version. CI compares the exported API with the baseline in api/ and fails on an incompatible
// change that the CHANGELOG does not name (docs/releasing.md). A change to the topology comes with
// an upgrade path, as the destination bindings' did (above).
package rabbitmq
