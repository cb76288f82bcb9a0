package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

func (b *broker) publisher(t *testing.T) *rabbitmq.Publisher {
	t.Helper()
	pub, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: b.url, Prefix: b.topo.Prefix(), QueueType: b.topo.QueueType()}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return pub
}

// subscribe consumes queue with amqptransport's Subscriber until the test ends.
func (b *broker) subscribe(t *testing.T, queue string) <-chan *message.Message {
	t.Helper()
	sub, err := amqptransport.NewSubscriber(amqptransport.Config{URL: b.url}, watermill.NopLogger{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sub.Close())
	})
	msgs, err := sub.Subscribe(ctx, queue)
	require.NoError(t, err)
	return msgs
}

func receive(t *testing.T, msgs <-chan *message.Message, within time.Duration) *message.Message {
	t.Helper()
	select {
	case msg := <-msgs:
		msg.Ack()
		return msg
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return nil
	}
}

func TestPublisherDelaysAndKeepsTheMessage(t *testing.T) {
	t.Parallel()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	pub := b.publisher(t)
	dest := uniqueName(t, "native-dest") + ".with.dots"
	b.queue(t, dest)
	msgs := b.subscribe(t, dest)

	msg := message.NewMessage(watermill.NewUUID(), []byte("body \x00 bytes"))
	msg.Metadata.Set("trace", "abc")
	msg.Metadata.Set(wire.HeaderOwner, "order-7") // the timeout manager's routing header goes
	timeouts.DeliverAfter(msg, 2*time.Second)
	start := time.Now()
	require.NoError(t, pub.Publish(dest, msg))

	got := receive(t, msgs, 30*time.Second)
	elapsed := time.Since(start)
	t.Logf("delivered after %s", elapsed)
	require.GreaterOrEqual(t, elapsed, 2*time.Second, "never early")
	require.Equal(t, msg.UUID, got.UUID)
	require.Equal(t, msg.Payload, got.Payload)
	require.Equal(t, "abc", got.Metadata.Get("trace"))
	require.NotContains(t, got.Metadata, "x-death")
	require.NotContains(t, got.Metadata, wire.HeaderOwner)
	require.NotContains(t, got.Metadata, wire.HeaderExpire)
	require.Equal(t, msg.Metadata.Get(wire.HeaderExpire), got.Metadata.Get(wire.HeaderDue), "the delivered message says when it was due")

	keyed := message.NewMessage(watermill.NewUUID(), nil)
	timeouts.DeliverAfter(keyed, time.Second)
	timeouts.WithKey(keyed, "order-7/payment", persistence.KeyReplace)
	err := pub.Publish(dest, keyed)
	require.ErrorIs(t, err, wire.ErrInvalidHeader, "native delay cannot deduplicate")
	require.ErrorContains(t, err, wire.HeaderKey)

	now := message.NewMessage(watermill.NewUUID(), []byte("at once"))
	require.NoError(t, pub.Publish(dest, now))
	require.Equal(t, now.UUID, receive(t, msgs, 10*time.Second).UUID)
}

func TestPublisherCreatesAndBindsAMissingDestination(t *testing.T) {
	t.Parallel()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	pub := b.publisher(t)
	dest := uniqueName(t, "native-new")
	t.Cleanup(func() {
		if ch, err := b.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(dest, false, false, false)
			_ = ch.Close()
		}
	})
	exists, err := pub.DestinationExists(context.Background(), dest)
	require.NoError(t, err)
	require.False(t, exists)
	require.NoError(t, pub.Publish(dest, message.NewMessage(watermill.NewUUID(), nil)))
	exists, err = pub.DestinationExists(context.Background(), dest)
	require.NoError(t, err)
	require.True(t, exists)
	receive(t, b.subscribe(t, dest), 10*time.Second)
}

func TestPublisherFailsInsteadOfDropping(t *testing.T) {
	t.Parallel()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	pub := b.publisher(t)
	dest := uniqueName(t, "native-dest")
	b.queue(t, dest)

	tooLong := message.NewMessage(watermill.NewUUID(), nil)
	timeouts.DeliverAfter(tooLong, rabbitmq.MaxDelay+time.Hour)
	err := pub.Publish(dest, tooLong)
	require.ErrorIs(t, err, rabbitmq.ErrDelayTooLong)
	require.ErrorContains(t, err, "268,435,455")

	require.ErrorIs(t, pub.Publish("orders.#", message.NewMessage(watermill.NewUUID(), nil)), rabbitmq.ErrInvalidDestination)

	// Without the binding of level 2's queue, a 5 s delay (entering at level 2) is returned.
	require.NoError(t, b.channel(t).QueueUnbind(b.topo.Queue(2), nativedelay.QueueBindingKey(2), b.topo.Exchange(2), nil))
	delayed := message.NewMessage(watermill.NewUUID(), nil)
	timeouts.DeliverAfter(delayed, 5*time.Second)
	err = pub.Publish(dest, delayed)
	require.ErrorIs(t, err, rabbitmq.ErrUnroutable)
	t.Log(err)

	// Without the delay infrastructure at all, the destination cannot be bound.
	b.deleteTopology(t)
	fresh := b.publisher(t)
	err = fresh.Publish(dest, message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, rabbitmq.ErrTopology)
	require.ErrorContains(t, err, "timeoutmill native setup")
}
