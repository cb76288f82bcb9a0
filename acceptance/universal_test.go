package acceptance

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// TestUniversalPubSubSuite runs Watermill's universal Pub/Sub suite against timeouts.Publisher
// wrapping the AMQP Publisher, with the AMQP Subscriber: messages that are not delayed go straight
// through, so the timeouts publisher is a drop-in for undelayed traffic.
//
// Features: queue semantics (no consumer groups), at-least-once, order kept (one consumer per
// subscription), persistent. The suite skips its TestReconnect without a restart command: it
// would restart the broker every test shares. Run against a broker of one's own it lost no message
// across two restarts, but it compares what was received with a list of what was published that
// a goroutine of its own may still be filling (a message is consumed before its publisher's
// confirm returns), so it fails now and then with "extra" messages: TestBrokerRestart covers
// restarts instead.
func TestUniversalPubSubSuite(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	prefix := "acc-universal-" + randomHex(t, 4) + "-"
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		require.NoError(t, err)
		defer conn.Close()
		deleteQueues(t, conn, queuesWithPrefix(t, prefix))
	})
	start := time.Now()
	t.Cleanup(func() { t.Logf("the universal suite ran for %s", time.Since(start).Round(time.Millisecond)) })

	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		// Under the race detector the full message counts (10,000 in TestPublisherClose) take
		// minutes on two cores; the suite's short counts still exercise every test.
		ForceShort:        raceEnabled,
		GenerateTopicFunc: func(tctx tests.TestContext) string { return prefix + string(tctx.TestID) },
	}, func(t *testing.T) (message.Publisher, message.Subscriber) {
		config := amqptransport.Config{URL: url, ConnectionName: prefix + "suite"}
		pub, sub, err := amqptransport.New(config, testLogger())
		require.NoError(t, err)
		delaying, err := timeouts.NewPublisher(pub, prefix+"endpoint")
		require.NoError(t, err)
		return delaying, sub
	}, nil)
}

// TestDelayedAndUndelayedShareOnePublisher shows the other half of the drop-in: the same
// publisher that passes the suite above delays what is marked for delay.
func TestDelayedAndUndelayedShareOnePublisher(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "dropin")
	n := startNode(t, e, "a", backends()[0].database(t, e.endpoint)(t), nil)
	dest := e.queue("mixed")
	delivered := receive(t, e, dest)

	later := message.NewMessage("later", nil)
	timeouts.DeliverAfter(later, time.Second)
	now := message.NewMessage("now", nil)
	require.NoError(t, n.manager.Publisher().Publish(dest, later, now))
	require.Equal(t, "now", await(t, delivered, lateBound).msg.UUID, "the undelayed one first")
	require.Equal(t, "later", await(t, delivered, lateBound).msg.UUID)
}
