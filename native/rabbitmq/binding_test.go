package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// depth is the number of messages in queue.
func (b *broker) depth(t *testing.T, queue string) int {
	t.Helper()
	q, err := b.channel(t).QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

// awaitDepth waits until queue holds want messages, and fails if it does not within a while.
func (b *broker) awaitDepth(t *testing.T, queue string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.depth(t, queue) != want {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d messages, not %d", queue, b.depth(t, queue), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDotSuffixDestinationsOnTheBroker: a message delayed for "billing.<q>" reaches that queue
// only, not "<q>" too, whether it waited in the levels or was due at once.
func TestDotSuffixDestinationsOnTheBroker(t *testing.T) {
	t.Parallel()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	pub := b.publisher(t)
	short := uniqueName(t, "orders")
	long := "billing." + short
	b.queue(t, short)
	b.queue(t, long)
	require.NoError(t, pub.EnsureDestinations(context.Background(), short, long))

	delayed := message.NewMessage(watermill.NewUUID(), []byte("delayed"))
	timeouts.DeliverAfter(delayed, time.Second)
	require.NoError(t, pub.Publish(long, delayed, message.NewMessage(watermill.NewUUID(), []byte("due"))))
	b.awaitDepth(t, long, 2)
	time.Sleep(300 * time.Millisecond) // anything misrouted would have arrived with them
	require.Zero(t, b.depth(t, short), "the shorter name's queue gets nothing")
}

// TestUpgradeReplacesTheLegacyBindings: infrastructure and destinations bound as NServiceBus (and
// earlier versions) bind them, "#.<queue>": Verify names the probe queue's legacy binding, Setup
// replaces it, and the Publisher (or BindDestinations) replaces a destination's on its first use,
// after which the shorter name's queue no longer receives the longer name's messages.
func TestUpgradeReplacesTheLegacyBindings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	short := uniqueName(t, "orders")
	long := "billing." + short
	b.queue(t, short)
	b.queue(t, long)
	other := uniqueName(t, "shipping")
	b.queue(t, other)

	// What an earlier version left: legacy bindings only.
	ch := b.channel(t)
	legacy := func(queue string) {
		require.NoError(t, ch.QueueUnbind(queue, nativedelay.DestinationBindingKey(queue), b.topo.DeliveryExchange(), nil))
		require.NoError(t, ch.QueueBind(queue, nativedelay.LegacyDestinationBindingKey(queue), b.topo.DeliveryExchange(), false, nil))
	}
	legacy(b.topo.ProbeQueue())
	legacy(short)
	legacy(long)
	legacy(other)

	err := b.topo.Verify(ctx, b.conn)
	require.ErrorIs(t, err, rabbitmq.ErrTopology)
	require.ErrorContains(t, err, "binding of queue "+b.topo.ProbeQueue()+" to exchange "+b.topo.DeliveryExchange()+" on #."+b.topo.ProbeQueue()+" is the legacy binding")
	t.Log(err)
	b.setup(t)
	require.NoError(t, b.topo.Verify(ctx, b.conn), "setup replaced the probe queue's binding")

	// Still legacy: the shorter name's queue gets the longer name's message.
	deliver := func(dest string) {
		t.Helper()
		key, err := nativedelay.RoutingKey(0, dest)
		require.NoError(t, err)
		require.NoError(t, ch.PublishWithContext(ctx, b.topo.DeliveryExchange(), key, false, false, amqp.Publishing{Body: []byte("x")}))
	}
	deliver(long)
	b.awaitDepth(t, long, 1)
	b.awaitDepth(t, short, 1)
	_, err = ch.QueuePurge(short, false)
	require.NoError(t, err)

	// A Publisher's first message to the longer name, and BindDestinations for the shorter one,
	// replace their bindings; messages waiting in the levels meanwhile are routed by the new ones.
	pub := b.publisher(t)
	delayed := message.NewMessage(watermill.NewUUID(), []byte("delayed"))
	timeouts.DeliverAfter(delayed, time.Second)
	require.NoError(t, pub.Publish(long, delayed))
	require.NoError(t, b.topo.BindDestinations(ctx, b.conn, short, other))
	b.awaitDepth(t, long, 2)
	deliver(long)
	deliver(short)
	deliver(other)
	b.awaitDepth(t, long, 3)
	b.awaitDepth(t, short, 1)
	b.awaitDepth(t, other, 1)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 1, b.depth(t, short), "only its own message: the legacy binding is gone")
	require.Equal(t, 3, b.depth(t, long))

	require.ErrorIs(t, b.topo.BindDestinations(ctx, b.conn, "orders.#"), rabbitmq.ErrInvalidDestination)
	err = b.topo.BindDestinations(ctx, b.conn, uniqueName(t, "missing"))
	require.Error(t, err, "a queue that does not exist is not created")
	require.ErrorContains(t, err, "binding destination")
}
