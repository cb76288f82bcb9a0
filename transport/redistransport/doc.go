// Package redistransport runs timeoutmill over Redis Streams: watermill-redisstream's Publisher
// and Subscriber with the settings the timeout manager needs, a reader that never fails on what a
// producer wrote, and the installer that creates an endpoint's streams and consumer groups.
//
//	pub, sub, err := redistransport.New(ctx, redistransport.Config{URL: "redis://localhost:6379/0"}, logger)
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
// Every topic is a stream of the same name. A stream is a log, not a queue: what makes it one is
// a consumer group. Every subscription of this package reads its stream in Config.ConsumerGroup
// ("timeoutmill" unless set), created from the stream's first entry ("0") when missing, so a
// message added before anyone subscribed is not skipped, and each entry goes to one consumer of
// the group: several instances of an endpoint share its satellite streams. An entry is
// acknowledged (XACK) after its handler succeeded; one handed to a consumer that died is claimed
// (XCLAIM) by another after Config.ClaimAfter. Subscribing without a consumer group would read
// the stream as a broadcast and is not offered.
//
// Acknowledged entries stay in the stream: Redis Streams has no delete-on-ack. Trim a stream
// with XTRIM ... MINID below the oldest entry still pending in any of its groups (XINFO GROUPS,
// XPENDING); a MAXLEN trim can delete entries no group has read yet, which loses them.
//
// # Entries
//
// An entry has the fields "_watermill_message_uuid", "payload" and "metadata" (the headers as a
// MessagePack map), watermill-redisstream's format. A producer that is not Watermill may instead
// write each header as a field of its own:
//
//	XADD orders.Timeouts * payload "charge order 42" timeout.expire 2030-01-02T15:04:05Z timeout.destination payments
//
// An entry without a UUID gets one; a "metadata" field that is not a MessagePack map of strings
// is kept as the header "redis.unreadable-metadata" with the reason, so that the message ends on
// the error queue with its reason rather than stopping the subscription (watermill-redisstream's
// own reader stops reading a stream at such an entry).
//
// # Durability
//
// Redis acknowledges a write once it is in memory. Only with the append-only file and
// "appendfsync always" has it reached the disk by then; with "everysec" (Redis' default when the
// AOF is on) a crash loses up to a second of acknowledged writes, and with snapshots only
// (Redis' default) everything since the last snapshot: stored timeouts announced to
// E.TimeoutsDispatcher, messages forwarded to a destination, delayed messages accepted on
// E.Timeouts. Replication is asynchronous, so a failover can lose acknowledged writes too.
//
// # Reconnection
//
// go-redis reconnects by itself: while Redis is away a Publish fails (the dispatch satellite
// retries it) and subscriptions retry their reads every half second, then resume. A nacked
// message is handed again only once Redis answers a PING, so that a forward that failed because
// Redis went away is tried again when it is back, not in a loop during the outage (where a
// failed forward followed by a successful move to the error queue would send a good message
// there). Close returns once every subscription's channel is closed.
//
// # Stability
//
// This package's API is stable. While timeoutmill is at v0, an incompatible change to it is made
// only with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in
// a new major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md).
package redistransport
