package bench

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
)

// TestNativeRigsDeliverOnLevelsOfTheirOwn: both native systems deliver a delayed message through
// delay levels declared for the rig alone, never early.
func TestNativeRigsDeliverOnLevelsOfTheirOwn(t *testing.T) {
	url := testenv.AMQPURL(t)
	for _, sys := range []System{nativeRabbitMQ(), nativePlain()} {
		t.Run(sys.Name, func(t *testing.T) {
			env := Env{AMQPURL: url, TempDir: t.TempDir(), Logger: watermill.NopLogger{}}
			dest := testenv.UniqueName(t, "tbnative")
			rig, err := sys.Open(t.Context(), env, dest)
			require.NoError(t, err)
			defer func() { require.NoError(t, rig.Close()) }()

			msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
			due := time.Now().Add(1500 * time.Millisecond)
			rig.Mark(msg, due)
			require.NoError(t, rig.Publish(dest, msg))
			select {
			case got := <-rig.Arrivals:
				got.Ack()
				require.Equal(t, msg.UUID, got.UUID)
				require.False(t, time.Now().Before(due), "delivered before due")
			case <-time.After(30 * time.Second):
				t.Fatal("the delayed message did not arrive within 30 s")
			}
		})
	}
}

// TestDeleteNativeTopologyLeavesNothing: a rig's levels, once deleted, are gone, so that nothing
// one run left in them reaches another.
func TestDeleteNativeTopologyLeavesNothing(t *testing.T) {
	url := testenv.AMQPURL(t)
	prefix, remove := nativeTopology(url)
	pub, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: url, Prefix: prefix}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, pub.Setup(t.Context()))
	require.NoError(t, pub.Close())
	require.NoError(t, remove())

	topology, err := nativedelay.NewTopology(prefix, nativedelay.Quorum)
	require.NoError(t, err)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range []string{topology.Queue(0), topology.Queue(nativedelay.Levels - 1), topology.UnroutableQueue(), topology.ProbeQueue()} {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		var amqpErr *amqp.Error
		require.ErrorAs(t, err, &amqpErr, "queue %s", q)
		require.Equal(t, amqp.NotFound, amqpErr.Code, "queue %s is gone", q)
	}
}
