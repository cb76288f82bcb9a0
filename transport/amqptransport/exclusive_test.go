package amqptransport_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/exclusive"
)

// A subscription asked to be its queue's only consumer (as recoverability asks for a deferred
// queue) is refused at Subscribe while another holds the queue, in another process as well (here,
// another connection), and may take the queue once that one has stopped.
func TestAnExclusiveSubscriptionRefusesASecondConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("exclusive")
	first := newSubscriber(t, b.config)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	msgs, err := first.Subscribe(exclusive.With(ctx), q)
	require.NoError(t, err)

	second := newSubscriber(t, b.config)
	_, err = second.Subscribe(exclusive.With(context.Background()), q)
	require.ErrorIs(t, err, exclusive.ErrInUse)
	require.ErrorContains(t, err, q)

	pub := newPublisher(t, b.config)
	sent := message.NewMessage(watermill.NewUUID(), []byte("to the only consumer"))
	require.NoError(t, pub.Publish(q, sent))
	got := receive(t, msgs, 10*time.Second)
	require.Equal(t, sent.UUID, got.UUID)
	got.Ack()

	stop()
	for range msgs { // until the subscription has stopped
	}
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := second.Subscribe(exclusive.With(ctx), q); err != nil {
			cancel()
			require.ErrorIs(t, err, exclusive.ErrInUse)
			return false
		}
		t.Cleanup(cancel)
		return true
	}, 10*time.Second, 50*time.Millisecond, "the queue is free once its consumer has stopped")
}
