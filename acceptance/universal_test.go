package acceptance

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
)

// TestUniversalPubSubSuite runs Watermill's universal Pub/Sub suite against timeouts.Publisher
// wrapping each broker's Publisher, with its Subscriber: messages that are not delayed go straight
// through, so the timeouts publisher is a drop-in for undelayed traffic.
//
// Features: queue semantics (no consumer groups), at-least-once, persistent, one consumer per
// subscription. Order is kept on RabbitMQ and Redis (a nacked message is handed again at once);
// JetStream delivers a nacked message again after those behind it. The suite skips its
// TestReconnect without a restart command: it would restart the broker every test shares. Run
// against a RabbitMQ of one's own it lost no message across two restarts, but it compares what
// was received with a list of what was published that a goroutine of its own may still be
// filling (a message is consumed before its publisher's confirm returns), so it fails now and
// then with "extra" messages: the broker restart tests cover restarts instead.
func TestUniversalPubSubSuite(t *testing.T) {
	t.Parallel()
	for _, b := range brokers() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := "acc-universal-" + b.name + "-" + randomHex(t, 4) + "-"
			t.Cleanup(func() { b.forget(t, prefix) })
			start := time.Now()
			t.Cleanup(func() {
				t.Logf("%s: the universal suite ran for %s", b.name, time.Since(start).Round(time.Millisecond))
			})

			tests.TestPubSub(t, tests.Features{
				ConsumerGroups:                      false,
				ExactlyOnceDelivery:                 false,
				GuaranteedOrder:                     b.name != "nats",
				GuaranteedOrderWithSingleSubscriber: b.name != "nats",
				Persistent:                          true,
				// Under the race detector the full message counts (10,000 in TestPublisherClose)
				// take minutes on two cores; the suite's short counts still exercise every test.
				ForceShort:        raceEnabled,
				GenerateTopicFunc: func(tctx tests.TestContext) string { return prefix + string(tctx.TestID) },
			}, func(t *testing.T) (message.Publisher, message.Subscriber) {
				ps := b.open(t, prefix+"suite", 1)
				delaying, err := timeouts.NewPublisher(ps.pub, prefix+"endpoint")
				require.NoError(t, err)
				return delaying, ps.sub
			}, nil)
		})
	}
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
