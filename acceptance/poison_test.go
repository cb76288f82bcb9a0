package acceptance

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// TestPoisonMessagesEndOnTheErrorQueueAndServiceGoesOn sends what can never be delivered: a
// garbage timeout.expire with a non-string header beside it, a message without destination, two
// malformed dispatcher messages (an empty id, a miscounted list of ids), and a due message for a queue the broker refuses to create. Each
// must reach the error queue once, with a failure.reason, not be dropped or retried forever; and
// the endpoint keeps delivering good messages.
func TestPoisonMessagesEndOnTheErrorQueueAndServiceGoesOn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, "poison")
		store := b.database(t, e.endpoint)(t)
		n := startNode(t, e, "a", store, nil)
		dest := e.queue("good")
		delivered := receive(t, e, dest)
		errs := receive(t, e, e.errorQueue)

		timeoutsQueue := wire.TimeoutsQueue(e.endpoint)
		e.publishRaw(t, timeoutsQueue, amqp.Publishing{
			MessageId: "garbage-expire",
			Body:      []byte("poison 1"),
			Headers: amqp.Table{
				wire.HeaderExpire:      "next tuesday",
				wire.HeaderDestination: dest,
				"attempt":              int32(7),
				"x-death":              []any{amqp.Table{"count": int64(1), "queue": "elsewhere", "reason": "rejected"}},
			},
		})
		got := await(t, errs, lateBound)
		require.Equal(t, "garbage-expire", got.msg.UUID)
		require.Equal(t, "poison 1", string(got.msg.Payload))
		require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), wire.HeaderExpire)
		require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), "next tuesday")
		require.Equal(t, timeoutsQueue, got.msg.Metadata.Get(wire.HeaderFailureQueue))
		require.Equal(t, "7", got.msg.Metadata.Get("attempt"), "the non-string header, as a string")
		require.Equal(t, "next tuesday", got.msg.Metadata.Get(wire.HeaderExpire), "the original headers are kept for a person to look at")
		require.NotContains(t, got.msg.Metadata, "x-death")
		t.Logf("%s: failure.reason = %q", b.name, got.msg.Metadata.Get(wire.HeaderFailureReason))

		e.publishRaw(t, timeoutsQueue, amqp.Publishing{
			MessageId: "no-destination",
			Body:      []byte("poison 2"),
			Headers:   amqp.Table{wire.HeaderExpire: time.Now().Format(time.RFC3339)},
		})
		got = await(t, errs, lateBound)
		require.Equal(t, "no-destination", got.msg.UUID)
		require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), wire.HeaderDestination)

		dispatcherQueue := wire.DispatcherQueue(e.endpoint)
		e.publishRaw(t, dispatcherQueue, amqp.Publishing{MessageId: "empty-id", Body: nil})
		got = await(t, errs, lateBound)
		require.Equal(t, "empty-id", got.msg.UUID)
		require.Equal(t, dispatcherQueue, got.msg.Metadata.Get(wire.HeaderFailureQueue))
		require.NotEmpty(t, got.msg.Metadata.Get(wire.HeaderFailureReason))

		// Many ids whose count header says otherwise: the message goes whole, as it came.
		e.publishRaw(t, dispatcherQueue, amqp.Publishing{
			MessageId: "miscounted-ids", Body: []byte("id-1\nid-2\n"),
			Headers: amqp.Table{dispatcherqueue.HeaderDispatchIDs: "3"},
		})
		got = await(t, errs, lateBound)
		require.Equal(t, "miscounted-ids", got.msg.UUID)
		require.Equal(t, "id-1\nid-2\n", string(got.msg.Payload))
		require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), "says 3 ids, the payload holds 2")

		// Due, but its destination cannot be declared (amq.* is reserved): a failed forward,
		// and with no retries configured, the error queue, the routing headers back on it.
		refused := "amq.timeoutmill-" + e.endpoint
		undeliverable := message.NewMessage(watermill.NewUUID(), []byte("nowhere to go"))
		timeouts.DeliverAfter(undeliverable, 200*time.Millisecond)
		require.NoError(t, n.manager.Publisher().Publish(refused, undeliverable))
		got = await(t, errs, lateBound)
		require.Equal(t, undeliverable.UUID, got.msg.UUID)
		require.Equal(t, refused, got.msg.Metadata.Get(wire.HeaderDestination))
		require.Equal(t, dispatcherQueue, got.msg.Metadata.Get(wire.HeaderFailureQueue))
		reason := got.msg.Metadata.Get(wire.HeaderFailureReason)
		require.Contains(t, reason, "ACCESS_REFUSED")
		t.Logf("%s: undeclarable destination: failure.reason = %q", b.name, reason)

		// The endpoint still serves, and nothing is stuck or redelivered in a loop.
		good := message.NewMessage(watermill.NewUUID(), []byte("still served"))
		timeouts.DeliverAfter(good, 300*time.Millisecond)
		require.NoError(t, n.manager.Publisher().Publish(dest, good))
		require.Equal(t, good.UUID, await(t, delivered, lateBound).msg.UUID)
		requireNothing(t, errs, time.Second)
		require.Zero(t, e.messageCount(t, timeoutsQueue))
		require.Zero(t, e.messageCount(t, dispatcherQueue))
		require.Zero(t, pending(t, store))
	})
}
