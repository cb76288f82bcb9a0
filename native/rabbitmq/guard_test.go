package rabbitmq_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
)

// TestVerifyNamesEachPieceOfTheGuard: the guard's exchanges and queue are checked like the rest,
// its alternate exchange included, and each problem says what the guard is for.
func TestVerifyNamesEachPieceOfTheGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	ch := b.channel(t)
	_, err := ch.QueueDelete(b.topo.UnroutableQueue(), false, false, false)
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDelete(b.topo.DestinationsExchange(), false, false))
	require.NoError(t, ch.ExchangeDeclare(b.topo.DestinationsExchange(), amqp.ExchangeTopic, true, false, false, false, nil))

	err = b.topo.Verify(ctx, b.conn)
	require.ErrorIs(t, err, rabbitmq.ErrTopology)
	t.Logf("%s", err)
	require.ErrorContains(t, err, "queue "+b.topo.UnroutableQueue()+" is missing (the guard: without it")
	require.ErrorContains(t, err, "exchange "+b.topo.DestinationsExchange()+" differs: inequivalent arg 'alternate-exchange'")

	// setup cannot declare an exchange again with other arguments: it says which.
	err = b.topo.Setup(ctx, b.conn)
	require.ErrorContains(t, err, "declaring exchange "+b.topo.DestinationsExchange())
	require.NoError(t, ch.ExchangeDelete(b.topo.DestinationsExchange(), false, false))
	b.setup(t)
	require.NoError(t, b.topo.Verify(ctx, b.conn))
}

// TestPublisherNeedsTheGuard: a Publisher does not bind a destination where the guard is missing
// (an earlier setup): it asks for `timeoutmill native setup`.
func TestPublisherNeedsTheGuard(t *testing.T) {
	t.Parallel()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	require.NoError(t, b.channel(t).ExchangeDelete(b.topo.DestinationsExchange(), false, false))
	dest := uniqueName(t, "dest")
	b.queue(t, dest)
	err := b.publisher(t).Publish(dest, message.NewMessage(watermill.NewUUID(), []byte("x")))
	require.ErrorIs(t, err, rabbitmq.ErrTopology)
	require.ErrorContains(t, err, "timeoutmill native setup")
}

// TestMessagesForADeletedQueueWaitInTheUnroutableQueue: once a destination is bound, a message
// for it published after its queue was deleted, delayed or not, waits in the unroutable queue
// with the routing key that names its destination; none goes back to the sender, none is lost.
func TestMessagesForADeletedQueueWaitInTheUnroutableQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	dest := uniqueName(t, "dest")
	b.queue(t, dest)
	pub := b.publisher(t)
	require.NoError(t, pub.EnsureDestinations(ctx, dest))
	_, err := b.channel(t).QueueDelete(dest, false, false, false)
	require.NoError(t, err)

	require.NoError(t, pub.Publish(dest, message.NewMessage(watermill.NewUUID(), []byte("now"))))
	b.awaitDepth(t, b.topo.UnroutableQueue(), 1)
	counts, err := b.topo.ListUnroutable(ctx, b.conn, 100)
	require.NoError(t, err)
	require.Equal(t, []nativedelay.Unroutable{{Destination: dest, Messages: 1}}, counts)
	b.awaitDepth(t, b.topo.UnroutableQueue(), 1) // listing takes nothing: what it read goes back

	// Replayed once the queue is back: straight to it, and gone from the unroutable queue.
	b.queue(t, dest)
	counts, err = b.topo.ReplayUnroutable(ctx, b.conn, nil)
	require.NoError(t, err)
	require.Equal(t, []nativedelay.Unroutable{{Destination: dest, Messages: 1, QueueExists: true, Replayed: 1}}, counts)
	b.awaitDepth(t, dest, 1)
	b.awaitDepth(t, b.topo.UnroutableQueue(), 0)
}
