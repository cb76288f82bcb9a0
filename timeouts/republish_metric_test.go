package timeouts_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// batchRefusingPublisher refuses every publish of more than one message to topic, as a broker
// refuses a batch for one message it will not take.
type batchRefusingPublisher struct {
	message.Publisher
	topic string
}

func (p batchRefusingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic == p.topic && len(msgs) > 1 {
		return errors.New("the broker refused one message of the batch")
	}
	return p.Publisher.Publish(topic, msgs...)
}

func TestMetricsCountTheRepublishAloneOfARefusedBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		b := setup(t, memory.New(), func(c *timeouts.Config) {
			c.MetricsRegisterer = reg
			c.Publisher = batchRefusingPublisher{Publisher: c.Publisher, topic: "batched"}
		})
		delivered := subscribe(t, b.pubSub, "batched")

		due := time.Now().Add(100 * time.Millisecond)
		for range 3 { // due at one instant: one claim, one announcement, one batch
			msg := message.NewMessage(watermill.NewUUID(), nil)
			timeouts.DeliverAt(msg, due)
			require.NoError(t, b.manager.Publisher().Publish("batched", msg))
		}
		for range 3 {
			await(t, delivered, 5*time.Second)
		}
		synctest.Wait() // the forwards are confirmed and counted
		expected := `
# HELP timeoutmill_dispatch_republished_alone_total Due messages published again one by one after the publish of their batch was refused.
# TYPE timeoutmill_dispatch_republished_alone_total counter
timeoutmill_dispatch_republished_alone_total{endpoint="orders"} 3
`
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected), "timeoutmill_dispatch_republished_alone_total"))
	})
}
