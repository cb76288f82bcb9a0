// Package nats delays messages in NATS JetStream itself, with the server's message schedules
// (nats-server 2.12 or later), instead of storing them in a database until they are due: the
// NATS counterpart of package native/rabbitmq.
//
//	pub, err := nats.NewPublisher(nats.Config{URL: "nats://localhost:4222"}, logger)
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	if err := pub.Setup(ctx); err != nil { // or `timeoutmill native setup --transport nats://…` once
//		return err
//	}
//	msg := message.NewMessage(watermill.NewUUID(), payload)
//	timeouts.DeliverAfter(msg, 90*time.Minute)
//	err = pub.Publish("orders", msg) // arrives on subject "orders" in 90 minutes
//
// # How a message waits
//
// A stream with AllowMsgSchedules keeps a message published with the headers
// "Nats-Schedule: @at <time>" and "Nats-Schedule-Target: <subject>", and when the time comes the
// server stores a copy on the target subject, without the schedule headers, and removes the
// schedule. The Publisher writes the time itself, in RFC 3339 with its nanoseconds (rounded up
// to the microsecond the stores keep): nats.go's jetstream.WithScheduleAt drops the fraction, so
// a message scheduled with it arrives up to a second early. The server fires a schedule no
// earlier than its time by its own clock.
//
// Each message waits on a subject of its own, PREFIX.<id> (Config.SubjectPrefix, default
// "timeoutmill.schedules"): a schedule replaces the one before it on its subject (a roll-up), so
// with a shared subject a second message would silently replace the first. The id is the
// message's UUID as it is when it holds only ASCII letters, digits, '-' and '_' (UUIDs), and "~"
// followed by its unpadded base64url otherwise, so ids with dots, spaces, wildcards or any other
// bytes never share a subject. An id that a NATS header cannot carry (a line break, spaces at
// either end), an empty one, or one over MaxIDLength bytes is refused with ErrInvalidID.
//
// # The schedule stream captures the destinations
//
// The server delivers a schedule only to a subject of its own stream (it refuses another
// target). So the schedule stream (Config.Stream, default "timeoutmill_schedules") captures
// PREFIX.> and every destination subject: before its first message to a destination the
// Publisher adds the subject to the stream, unless the stream captures it already.
// natstransport's Subscriber, and any JetStream consumer, read the destination from that stream
// as they would from any other. Two consequences:
//
//   - A destination another stream captures is refused (ErrInvalidDestination, naming that
//     stream). Either consume it from the schedule stream instead, or keep your stream and give
//     it a source: the schedule stream, filtered on the destination subject.
//   - Add destinations before their consumers start (EnsureDestinations, or `timeoutmill native
//     setup --destination SUBJECT`): natstransport's Subscriber creates a stream of its own for
//     a subject no stream captures.
//
// Delivered messages stay in the schedule stream under its limits, as on any limits-retention
// stream. Do not give it MaxAge, nor MaxMsgs or MaxBytes with DiscardOld: they would remove
// pending schedules; Verify reports them.
//
// # The wire contract
//
// Publish reads the due time as timeouts.Publisher does (timeouts.DeliverAt,
// timeouts.DeliverAfter, Watermill's delay.Message; an unreadable one is wire.ErrInvalidHeader);
// the topic is the destination subject. The delivered message keeps its body, UUID
// ("_watermill_message_uuid") and headers, less the timeout manager's routing headers, with
// wire.HeaderDue set to its due time when it had one. The server adds "Nats-Scheduler" (the
// schedule's subject) and "Nats-Schedule-Next: purge"; natstransport's Subscriber leaves them out,
// so a handler that copies the metadata onto a message it publishes does not make it a schedule.
// Headers NATS cannot carry travel as natstransport encodes them, and its Subscriber decodes them.
//
//   - No due time, or one already past: the message is published to its destination at once,
//     with its UUID as Nats-Msg-Id (the stream drops a copy sent again within its duplicate
//     window), as native/rabbitmq delivers it at once.
//   - Keys (wire.HeaderKey): refused with wire.ErrInvalidHeader; deduplicate by key with the
//     timeout manager. A key would map onto a schedule subject, but that gives "the last one
//     wins", not the store's "the first one wins".
//   - Headers whose names start with "Nats-" are refused with wire.ErrInvalidHeader: JetStream
//     would act on them (Nats-Msg-Id, Nats-Rollup, Nats-TTL) or strip them.
//   - A due time the server refuses (it parses four-digit years only) fails with ErrRefused.
//   - A missing schedule stream, or one without AllowMsgSchedules, fails with ErrStream naming
//     it, checked before the first message and again whenever the server refuses a schedule for
//     it: never a plain message stored at once instead of a schedule.
//
// # Precision
//
// The server's scheduler runs its timer no sooner than 250 ms after it last ran
// (MsgScheduling.resetTimer in nats-server), so schedules due close together fire in waves at
// least 250 ms apart: a message arrives up to about 250 ms late when others are due around it,
// and a message scheduled already past arrives with the next wave. The emulated pipeline
// (timeouts.Manager) delivers within milliseconds of the due time.
//
// # What it cannot do
//
//   - Cancel by id only: Cancel deletes the schedule on PREFIX.<id>. It returns ErrNotScheduled
//     once the schedule fired (the message is delivered), and a Cancel racing the firing may
//     return nil while the message is delivered all the same.
//   - Reschedule: publishing a message with the same UUID again replaces its pending schedule
//     (new due time, body and headers); once the first fired, it is a second delivery. There is
//     no "move only the due time" call.
//   - List: there is no call to list pending schedules. They are the messages on PREFIX.> of the
//     schedule stream: a consumer filtered on that subject reads them (the due time is in
//     wire.HeaderDue, the destination in Nats-Schedule-Target), and the stream's subject state
//     (jetstream.WithSubjectFilter) counts them.
//   - No deduplication by key, no store-side transactions (the timeout manager stores a timeout
//     in the same database transaction as the business data with sqltransport), no due times
//     after the year 9999.
//
// # Migration
//
// `timeoutmill migrate --to nats-native --transport nats://… --store DSN --endpoint E` moves the
// stored timeouts of an endpoint into schedules, as `--to rabbitmq-native` does for RabbitMQ
// (native/rabbitmq's documentation, "Migration", says how batches are hidden, sent and removed
// while timeout managers keep running, and what a kill or an interruption does). Here a rerun
// after a kill sends no copy of what the killed run had sent and was still pending: each
// timeout's schedule replaces itself. Only a timeout that was already due, delivered at once, can
// arrive twice, when the rerun comes after the stream's duplicate window.
//
// # Servers
//
// nats-server 2.12 or later with JetStream (the suite runs 2.15). An older server either refuses
// the stream or keeps it without AllowMsgSchedules, which Setup reports as ErrStream. On a cluster, list
// several servers in Config.URL and set Config.Replicas to 3.
package nats
