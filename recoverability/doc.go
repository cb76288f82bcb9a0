// Package recoverability decides what happens to a message that could not be handled: retried
// at once, retried later through a deferred queue, or moved to the error queue with failure
// headers (wire.HeaderFailureReason and friends) — never dropped, never retried forever.
//
// # Retries for a handler
//
// Watermill's middleware.Retry sleeps inside the handler between attempts, holding up the
// subscriber and losing the schedule when the process stops. Retries follows Shuttle ESB
// instead: a failed message goes back to its work queue marked with the time before which it
// must be ignored, and waits in a deferred queue meanwhile. The wait lives in the message, so it
// survives restarts wherever the transport's queues are durable.
//
//	retries, err := recoverability.New(recoverability.Config{
//		WorkQueue:     "orders",
//		DeferredQueue: wire.DeferredQueue("orders", hostname), // orders.Deferred.<hostname>: this instance's
//		Publisher:     pubSub,
//		Subscriber:    pubSub,
//		DurationToIgnoreOnFailure: []time.Duration{10 * time.Second, 30 * time.Second, time.Minute},
//	}, logger)
//	handler := router.AddConsumerHandler("orders", "orders", pubSub, handle)
//	handler.AddMiddleware(retries.Middleware) // this handler only, never router.AddMiddleware
//	err = retries.AddToRouter(router)         // the deferred queue's processor
//
// On a message's first failure the handler is called again at once up to ImmediateRetries
// times. If it still fails and the schedule has an entry left, a copy of the message — same UUID,
// payload and headers — is published to the work queue with wire.HeaderRetryIgnoreUntil set to
// now plus DurationToIgnoreOnFailure[n] and the counters wire.HeaderRetryAttempts and
// wire.HeaderRetryDelayedRetries, and the original is acked. Config.MaximumFailureCount, when
// given, decides instead as Shuttle does: the message is retried while its failed deliveries
// number fewer than MaximumFailureCount, the n-th waiting the n-th duration of the schedule or its
// last one. Whoever receives a message whose ignore-until time lies ahead moves it to its own
// deferred queue and lowers that queue's next processing time; its handler is not called. Out of
// retries, the message goes to the error queue with wire.HeaderFailureReason (the error's text), wire.HeaderFailureQueue (the
// work queue), wire.HeaderFailureHandler, wire.HeaderFailureTime, wire.HeaderFailureAttempts (all
// handler calls) and wire.HeaderFailureDelayedRetries (its failed deliveries less one); its body
// and its other headers are unchanged, less the retry headers, so that returning it to the work
// queue starts afresh.
//
// Configuration can also come from a file in Shuttle's shape, as it stands; see ReadConfig.
//
// # The deferred queue
//
// A deferred queue (Config.DeferredQueue, any name) belongs to one running instance and is never
// shared: how it is processed relies on one reader. It is processed in passes — once at
// start-up, then whenever its earliest message is due:
//
//   - A pass looks at each message once. A due message goes back to the work queue without its
//     ignore-until header; any other goes back to the tail of the deferred queue, stamped with
//     the pass's id (the retry.deferred_pass header), and its ignore-until time is remembered if it
//     is the earliest so far.
//   - The first message put back is the pass's checkpoint. When a stamped message comes round
//     again, every message in the queue has been looked at, and the pass is over: the next
//     processing time becomes the earliest ignore-until it put back, unless a message moved in
//     meanwhile lowered it further. A pass whose messages were all due simply finds the queue
//     empty; the next message to arrive is looked at in it.
//   - Between passes the processor holds the message that arrived — the checkpoint, or a newly
//     moved one — unacked, and waits until the next processing time (lowered at once when the
//     middleware moves an earlier message in, never later than its own ignore-until), or until
//     the router closes, when the message is nacked and stays on the queue. Then a new pass
//     starts with that message.
//
// It cannot spin on a queue of messages that are not due: within a pass every message is looked
// at once, because the stamp ends the pass when it comes round; and a pass only starts when the
// next processing time has come, which is the ignore-until time of a message known to be in the
// queue. A pass that starts therefore finds at least one due message, unless that message was
// looked at in the pass before — a due time remembered from a message moved in during a pass —
// and that costs one pass, not a loop. Stamping by pass rather than by message UUID keeps a
// duplicate (a redelivery after a crash) from ending a pass early. The processor holds one
// message for at most Config.MaxDeferredHold (5 minutes), below the time brokers let a delivery
// stay unacked, so on long waits it makes one pass that often.
//
// The processor runs as a router handler (AddToRouter). The middleware waits for its
// subscription before it moves anything there, because Watermill's GoChannel drops messages
// published to a topic nobody subscribes. GoChannel keeps nothing across a restart; on a durable
// transport (AMQP, SQL) the deferred queue, and with it every pending retry, survives one.
//
// # Never shared
//
// The processor asks the transport to make it the deferred queue's only consumer, and where the
// transport can tell that another consumer holds the queue, in this process or any other, the
// router refuses to start with ErrDeferredQueueInUse and the queue's name:
//
//   - amqptransport consumes a deferred queue as an exclusive consumer, which RabbitMQ refuses
//     while the queue has another consumer, and which keeps any other consumer out while it lasts.
//   - sqltransport holds a lock in the database for the queue's table (an advisory lock on
//     PostgreSQL, GET_LOCK on MySQL and MariaDB) on a connection of its own, for as long as the
//     subscription lasts; a process that dies releases it with its connection.
//   - Other transports cannot tell — Watermill's GoChannel, watermill-amqp's own subscriber, and
//     the rest — and share a deferred queue between two instances silently: each then takes the
//     other's messages, and a pass may end early or late. Within one process, one Retries refuses
//     a second router, and AddToRouter a second processor of the same queue in one router; beyond
//     that, naming each instance's queue apart (wire.DeferredQueue with a host or pod name) is up
//     to the configuration.
//
// # Without a deferred queue
//
// Without Config.DeferredQueue (and without Config.Subscriber, which only a deferred queue
// needs), as in Shuttle when none is configured, a message whose
// ignore-until time lies ahead is put straight back on the work queue, and comes round again and
// again until it is due. Shuttle's documentation calls this serious queue thrashing, to be avoided
// in anything but the simplest programs; it is supported for those, and New logs a warning saying
// so.
//
// # Failures of the timeout manager itself
//
// The timeout manager's satellites send the messages they can never handle to the same error
// queue (timeouts.Config.ErrorQueue), with the failure headers docs/wire.md lists.
//
// # Stability
//
// This package's API is stable, and so is the Shuttle configuration file it reads. While
// timeoutmill is at v0, an incompatible change to it is made only with an entry marked Breaking in
// CHANGELOG.md that says how to migrate; from v1 on, only in a new major version. CI compares the
// exported API with the baseline in api/ and fails on an incompatible change that the CHANGELOG
// does not name (docs/releasing.md).
package recoverability
