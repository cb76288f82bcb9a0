package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
)

// broker is a test's view of the real RabbitMQ: its URL, a connection, and a topology with a
// prefix of the test's own, deleted when the test ends.
type broker struct {
	url  string
	conn *amqp.Connection
	topo nativedelay.Topology
}

func newBroker(t *testing.T, queueType rabbitmq.QueueType) *broker {
	t.Helper()
	url := testenv.AMQPURL(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	topo, err := nativedelay.NewTopology(uniqueName(t, "native"), queueType)
	require.NoError(t, err)
	b := &broker{url: url, conn: conn, topo: topo}
	t.Cleanup(func() {
		b.deleteTopology(t)
		_ = conn.Close()
	})
	return b
}

func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	var r [6]byte
	_, err := rand.Read(r[:])
	require.NoError(t, err)
	return prefix + "-" + hex.EncodeToString(r[:])
}

// channel returns a channel closed when the test ends.
func (b *broker) channel(t *testing.T) *amqp.Channel {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// deleteTopology removes every exchange and queue of the test's topology.
func (b *broker) deleteTopology(t *testing.T) {
	t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer ch.Close()
	for level := 0; level < nativedelay.Levels; level++ {
		_, _ = ch.QueueDelete(b.topo.Queue(level), false, false, false)
		_ = ch.ExchangeDelete(b.topo.Exchange(level), false, false)
	}
	_, _ = ch.QueueDelete(b.topo.ProbeQueue(), false, false, false)
	_ = ch.ExchangeDelete(b.topo.DeliveryExchange(), false, false)
	_, _ = ch.QueueDelete(b.topo.UnroutableQueue(), false, false, false)
	_ = ch.ExchangeDelete(b.topo.DestinationsExchange(), false, false)
	_ = ch.ExchangeDelete(b.topo.UnroutableExchange(), false, false)
}

// setup declares the topology.
func (b *broker) setup(t *testing.T) {
	t.Helper()
	start := time.Now()
	require.NoError(t, b.topo.Setup(context.Background(), b.conn))
	t.Logf("setup took %s", time.Since(start).Round(time.Millisecond))
}

// queue declares a durable classic queue deleted when the test ends.
func (b *broker) queue(t *testing.T, name string) {
	t.Helper()
	_, err := b.channel(t).QueueDeclare(name, true, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		if ch, err := b.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	})
}
