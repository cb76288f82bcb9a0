package sqltransport

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"
)

// TestUniversalPubSubSuite runs Watermill's universal Pub/Sub suite on both dialects. Features:
// queues (no consumer groups), at least once, order kept with one consumer, persistent. It runs
// the suite's short variants (fewer messages): the long ones only repeat them, and the machines
// here have two cores for every test package at once.
func TestUniversalPubSubSuite(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		start := time.Now()
		t.Cleanup(func() { t.Logf("the universal suite ran for %s", time.Since(start).Round(time.Millisecond)) })
		tests.TestPubSub(t, tests.Features{
			ConsumerGroups:                      false,
			ExactlyOnceDelivery:                 false,
			GuaranteedOrder:                     true,
			GuaranteedOrderWithSingleSubscriber: true,
			Persistent:                          true,
			ForceShort:                          true,
		}, func(t *testing.T) (message.Publisher, message.Subscriber) {
			config := db.config()
			config.ResendInterval = 50 * time.Millisecond
			pub, sub, err := New(context.Background(), config, testLogger())
			require.NoError(t, err)
			return pub, sub
		}, nil)
	})
}
