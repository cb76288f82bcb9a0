// Package amqptransport runs timeoutmill over RabbitMQ (any AMQP 0-9-1 broker): a Watermill
// Publisher and Subscriber on amqp091-go with the settings the timeout manager needs (watermill-amqp
// v3's own were the first version; see below for what replaced them and why), a marshaler that accepts what producers other than Watermill send, and the installers
// that declare an endpoint's queues.
//
//	pub, sub, err := amqptransport.New(amqptransport.Config{URL: "amqp://guest:guest@localhost:5672/"}, logger)
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	if err := pub.DeclareEndpoint(ctx, "orders", ""); err != nil { // orders.Timeouts, orders.TimeoutsDispatcher, error
//		return err
//	}
//	manager, err := timeouts.NewManager(timeouts.Config{
//		Endpoint: "orders", Store: store, Publisher: pub, Subscriber: sub,
//	}, logger)
//
// # Topology
//
// Every topic is a durable queue of the same name on the default exchange: orders.Timeouts,
// orders.TimeoutsDispatcher, error, and each destination. Queues give each message to one
// consumer, so several instances of an endpoint share its satellite queues. Messages are
// persistent (Config.TransientAnnouncements makes the poller's announcements of due ids
// transient: a lost one is claimed again when its lease runs out), and every Publish waits for
// the broker's publisher confirms. The Publisher publishes through a channel pool of its own, which sends all of a Publish call's
// messages before waiting for their confirms: watermill-amqp's publisher waits for each
// message's confirm before sending the next, one round trip per message, which made the poller's
// announcements of due timeouts the slowest step of the pipeline. A call hands its channel on
// once it has sent, so concurrent calls pipeline their confirms on shared channels.
//
// A subscription is a consumer of this package's on one channel, which hands out up to
// Config.Consumers messages without waiting for their acks, so a router handles them side by
// side and the satellites batch them (with Consumers 1, the default: one message at a time, in
// queue order, as watermill-amqp's subscription hands them out); acks go back as multiple-acks
// where the messages before them are settled too (one frame for a batch), one by one behind a
// message still being handled. Closing such a subscription waits up to Config.CloseTimeout for the messages handed
// out to be settled, so that a handler finishing during a shutdown has its ack delivered.
//
// # Never into the void
//
// RabbitMQ silently drops a message published to the default exchange for a queue that does not
// exist. The Publisher therefore declares a topic's queue before its first publish to it on each
// connection (a passive declaration first, so an existing queue of any type or arguments is used
// as it is; a missing one is created durable), and remembers it until the connection is replaced.
// A queue that cannot be declared makes Publish fail, which the dispatch satellite counts as a
// failed forward. Publishing mandatory with returns handled was the alternative: watermill-amqp's
// publisher neither listens for returns nor exposes its channels to do so, and with confirms
// alone an unroutable mandatory message is still acked; declaring also makes the destination
// exist for a consumer that starts later, which a returned message would not.
//
// # Producers that are not Watermill
//
// The Subscriber never fails to read a message: non-string headers become strings (booleans as
// "true" or "false", numbers in decimal, timestamps in RFC 3339, arrays and tables as JSON),
// headers the broker adds (x-death, x-first-death-*, x-last-death-*, x-delivery-count,
// x-received-from) are dropped, and a message without Watermill's UUID header
// ("_watermill_message_uuid") takes its AMQP message-id as UUID. The content-type,
// content-encoding, correlation-id, reply-to, type and app-id properties arrive as the metadata
// "amqp.content-type", "amqp.content-encoding", "amqp.correlation-id", "amqp.reply-to",
// "amqp.type" and "amqp.app-id"; the Publisher turns those metadata back into the properties,
// and sends the UUID as the AMQP message-id too.
//
// # Reconnection
//
// The Publisher and the Subscriber each own a connection, named "<ConnectionName> publisher" and
// "<ConnectionName> subscriber" on the broker. They are made again with backoff
// (Config.Reconnect) whenever the broker closes them, as on a restart; subscriptions resume,
// and a Publish during the outage fails at once (the dispatch satellite retries it). Creating a
// Publisher or Subscriber needs the broker to be reachable at that moment. The connections are
// internal/amqpconn's rather than watermill-amqp's ConnectionWrapper, whose reconnection has a
// data race (upstream, v3.1.0) that kept the reconnection tests out of the race detector.
//
// # Stability
//
// This package's API is stable. While timeoutmill is at v0, an incompatible change to it is made
// only with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in
// a new major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md).
package amqptransport
