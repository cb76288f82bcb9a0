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
//		WorkQueue:  "orders",
//		Endpoint:   "orders",
//		Instance:   hostname, // the deferred queue is orders.Deferred.<hostname>
//		Publisher:  pubSub,
//		Subscriber: pubSub,
//		DurationToIgnoreOnFailure: []time.Duration{10 * time.Second, 30 * time.Second, time.Minute},
//	}, logger)
//	handler := router.AddConsumerHandler("orders", "orders", pubSub, handle)
//	handler.AddMiddleware(retries.Middleware) // this handler only, never router.AddMiddleware
//	err = retries.AddToRouter(router)         // the deferred queue's processor
//
// On a message's first failure the handler is called again at once up to ImmediateRetries
// times. If it still fails and the schedule has an entry left, a copy of the message — same UUID, payload and
// headers — is published to the work queue with wire.HeaderRetryIgnoreUntil set to now plus
// DurationToIgnoreOnFailure[n] and the counters wire.HeaderRetryAttempts and
// wire.HeaderRetryDelayedRetries, and the original is acked. Whoever receives a message whose
// ignore-until time lies ahead moves it to its own deferred queue and lowers that queue's next
// processing time; its handler is not called. With the schedule used up, the message goes to
// the error queue with wire.HeaderFailureReason (the error's text), wire.HeaderFailureQueue (the
// work queue), wire.HeaderFailureHandler, wire.HeaderFailureTime, wire.HeaderFailureAttempts (all
// handler calls) and wire.HeaderFailureDelayedRetries; its body and its other headers are
// unchanged, less the retry headers, so that returning it to the work queue starts afresh.
//
// Configuration can also come from a file section in Shuttle's shape; see ReadConfig.
//
// # The deferred queue
//
// A deferred queue, "<endpoint>.Deferred.<instance>", belongs to one running instance and is
// never shared: how it is processed relies on one reader. It is processed in passes — once at
// start-up, then whenever its earliest message is due:
//
//   - A pass looks at each message once. A due message goes back to the work queue without its
//     ignore-until header; any other goes back to the tail of the deferred queue, stamped with
//     the pass's id (wire.HeaderRetryDeferredPass), and its ignore-until time is remembered if it
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
// # Without a deferred queue
//
// Config.WithoutDeferredQueue runs without one, as Shuttle does when none is configured: a
// message whose ignore-until time lies ahead is put straight back on the work queue, and comes
// round again and again until it is due. Shuttle's documentation calls this serious queue
// thrashing, to be avoided in anything but the simplest programs; it is supported for those.
//
// # Failures of the timeout manager itself
//
// ErrorQueue is also what the timeout manager's satellites use for messages they can never
// handle, and Failure carries their reasons.
package recoverability
