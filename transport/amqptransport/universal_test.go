package amqptransport_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// TestUniversalSuiteWithManyConsumers runs Watermill's universal Pub/Sub suite against the
// Subscriber's own consumer (Consumers above 1: many messages handed out at once, multiple-acks),
// with the features it claims: queue semantics, at least once, persistent, no order. (With
// Consumers 1, one message at a time in queue order, acceptance/universal_test.go runs the suite
// with order guaranteed.)
func TestUniversalSuiteWithManyConsumers(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	prefix := "amqptransport-universal-" + randomHex(t) + "-"
	ctl := rabbitmqctl(t)
	t.Cleanup(func() { // the suite's queues, which it names from the prefix
		out, err := ctl("-q", "list_queues", "--no-table-headers", "name")
		require.NoError(t, err, "%s", out)
		conn, err := amqp.Dial(url)
		require.NoError(t, err)
		defer conn.Close()
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		for _, q := range strings.Fields(string(out)) {
			if strings.HasPrefix(q, prefix) {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
		}
	})
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:      false,
		ExactlyOnceDelivery: false,
		GuaranteedOrder:     false,
		Persistent:          true,
		// Under the race detector the full counts take minutes on two cores; the short ones still
		// run every test.
		ForceShort:        raceEnabled,
		GenerateTopicFunc: func(tctx tests.TestContext) string { return prefix + string(tctx.TestID) },
	}, func(t *testing.T) (message.Publisher, message.Subscriber) {
		// A message the suite leaves unacked at Close holds Close for CloseTimeout.
		config := amqptransport.Config{URL: url, ConnectionName: prefix + "suite", Consumers: 16, CloseTimeout: time.Second}
		pub, err := amqptransport.NewPublisher(config, watermill.NopLogger{})
		require.NoError(t, err)
		sub, err := amqptransport.NewSubscriber(config, watermill.NopLogger{})
		require.NoError(t, err)
		return pub, sub
	}, nil)
}
