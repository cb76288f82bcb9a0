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
// Consume destinations with amqptransport's Subscriber (or its Marshaler): the broker adds an
// x-death header to every message it dead-letters from level to level, which watermill-amqp's
// own marshaler cannot read; amqptransport's drops it.
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
//	binding  each destination queue Q to timeoutmill.delay-delivery on "#.Q"
//	queue    timeoutmill.delay-probes, bound like a destination, keeping nothing: where the
//	         probe messages of `timeoutmill native verify` end
//
// A message delayed by s seconds (rounded up) for queue Q gets the routing key of the 28 bits of
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
// # Never a silent drop
//
// A missing destination binding makes RabbitMQ drop the message when it leaves the levels
// (NServiceBus.RabbitMQ#367). The Publisher therefore declares the destination queue (as
// amqptransport does) and binds it before its first message to that destination on each
// connection, publishes mandatory with publisher confirms, and fails Publish for a message the
// broker returns or refuses. Routing to the destination happens only when the message leaves the
// levels, so a binding removed while messages wait cannot be seen at send time; with quorum
// queues those messages wait in level 0, retried about every 3 minutes, until it is back.
//
// Names of destinations end routing keys: at most 199 bytes, and no dot-separated word "*" or
// "#". Like NServiceBus's, the binding "#.Q" also matches a destination whose name ends with ".Q"
// (a queue "shipping" receives what is delayed for "sales.shipping"): do not name one destination
// as a dotted suffix of another.
package rabbitmq
