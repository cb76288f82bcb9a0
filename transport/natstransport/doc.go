// Package natstransport runs timeoutmill over NATS JetStream: watermill-nats' Publisher and
// Subscriber with the settings the timeout manager needs, the streams they need created before
// the first message, and a reader that never fails on what a producer wrote.
//
//	pub, sub, err := natstransport.New(natstransport.Config{URL: "nats://localhost:4222"}, logger)
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
// # Queues from streams
//
// Every topic is a subject of the same name. JetStream keeps only what a stream captures, and a
// publish to a subject no stream captures fails, so the Publisher makes sure a stream captures a
// topic before its first publish to it, and the Subscriber before subscribing: a stream that
// captures the subject already is used as it is; otherwise one is created, named after the topic
// with every character other than letters, digits, '-' and '_' replaced by '_' (stream names
// cannot hold dots): orders.Timeouts is captured by the stream orders_Timeouts. The streams of
// an endpoint's own queues (DeclareEndpoint) keep a message until it is acknowledged (work-queue
// retention, file storage); a destination's stream created here keeps messages under the
// server's limits only (limits retention, file storage), so that any consumer of it reads all:
// create destination streams yourself to choose their retention.
//
// A subscription is a durable push consumer with a deliver group, which makes it a queue: each
// message goes to one member of the group, and the consumer, with its position and its
// unacknowledged messages, outlives the subscription. Its name is Config.Durable and the topic,
// joined by '_' and with the same replacement as streams ("timeoutmill_orders_Timeouts"); its
// deliver group is Config.Durable. Instances of an endpoint share them. A message is acknowledged
// after its handler succeeded (explicit ack, waiting for the server's confirmation); one not
// acknowledged within Config.AckWait is delivered again.
//
// # Messages
//
// Headers travel as NATS headers, the UUID in "_watermill_message_uuid" (watermill-nats' format),
// so any NATS client can publish to E.Timeouts:
//
//	nats pub orders.Timeouts 'charge order 42' -H timeout.expire:2030-01-02T15:04:05Z -H timeout.destination:payments
//
// A message without a UUID gets one, and a header sent more than once arrives with its values
// joined by ", ". NATS headers take only printable ASCII names without ':', values without line
// breaks, and drop the spaces a value starts with; a header outside those (a name in Cyrillic, a
// value with a line break) travels as "_timeoutmill_b64_" + its name in unpadded base64url, with
// its value in standard base64, and arrives through this package as it was sent. The server
// refuses messages over its max_payload (1 MB unless configured).
//
// # Durability
//
// JetStream acknowledges a publish once the stream has it. With file storage and one server,
// NATS writes it to the operating system at once but asks the disk to keep it (fsync) only now
// and then, so a server crash loses nothing acknowledged while a crash of the machine or a
// power loss can; NATS 2.10 and later make that interval configurable (sync_interval, up to
// "always"). A cluster with streams replicated three times keeps acknowledged messages across
// the loss of one machine.
//
// # Servers and clusters
//
// NATS Server 2.9 or later with JetStream enabled; the tests run on 2.15. On a cluster, list
// its servers in Config.URL, separated by commas, and set Config.Replicas to 3: the streams this
// package creates, and their consumers, are then kept by three servers, and the loss of one is
// ridden out (its leaders are elected again elsewhere; what failed meanwhile is retried).
//
// # Reconnection
//
// The connections reconnect by themselves for as long as they are open, to any server of
// Config.URL: while none answers a Publish fails (the dispatch satellite retries it), and
// subscriptions resume afterwards.
//
// # Stability
//
// This package's API is stable. While timeoutmill is at v0, an incompatible change to it is made
// only with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in
// a new major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md).
package natstransport
