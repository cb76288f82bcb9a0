package rabbitmq_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
)

// FuzzParseRoutingKey reads arbitrary routing keys, as a delivery exchange may receive them from
// any producer: no panic; a key it accepts is exactly the key RoutingKey builds for its delay and
// destination, it reaches that destination's binding (and not that of another destination that
// is not a dot-suffix of it: see TestDotSuffixDestinationsShareMessages), and it enters the level
// queue of its highest bit.
func FuzzParseRoutingKey(f *testing.F) {
	key, err := rabbitmq.RoutingKey(5, "orders")
	require.NoError(f, err)
	for _, s := range []string{key, key[:55], strings.Replace(key, "1", "2", 1), key + ".#", key[:56] + "*.x", key[:56] + "a..b", ""} {
		f.Add(s, "orders")
	}
	f.Fuzz(func(t *testing.T, key, other string) {
		seconds, dest, err := rabbitmq.ParseRoutingKey(key)
		if err != nil {
			require.ErrorIs(t, err, rabbitmq.ErrInvalidDestination)
			return
		}
		require.LessOrEqual(t, seconds, uint32(rabbitmq.MaxDelaySeconds))
		built, err := rabbitmq.RoutingKey(seconds, dest)
		require.NoError(t, err)
		require.Equal(t, key, built, "accepted keys round-trip")
		require.True(t, matchTopic(rabbitmq.DestinationBindingKey(dest), key), "reaches its destination")
		if other != dest && rabbitmq.ValidateDestination(other) == nil && !strings.HasSuffix(dest, "."+other) {
			require.False(t, matchTopic(rabbitmq.DestinationBindingKey(other), key), "%q's binding catches a message for %q", other, dest)
		}
		if level := rabbitmq.Level(seconds); level >= 0 {
			require.True(t, matchTopic(rabbitmq.QueueBindingKey(level), key), "enters the queue of its highest bit")
		}
	})
}

// TestDotSuffixDestinationsShareMessages is what the fuzz test above found: with NServiceBus's
// binding "#.<destination>", a message for "billing.orders" also matches the binding of
// "orders", so where both queues are bound to the delivery exchange it is delivered to both. A
// binding of 28 single-word wildcards and the destination ("*.*. … *.orders") would match only
// keys for exactly that destination. Skipped until the topology's owner decides (the binding is
// NServiceBus.RabbitMQ's, and existing bindings would need migrating); remove the skip to see it.
func TestDotSuffixDestinationsShareMessages(t *testing.T) {
	t.Parallel()
	t.Skip("known: \"#.orders\" also catches messages for \"billing.orders\" (reported from the fault suite, issue 7)")
	key, err := rabbitmq.RoutingKey(5, "billing.orders")
	require.NoError(t, err)
	require.False(t, matchTopic(rabbitmq.DestinationBindingKey("orders"), key), "orders' binding catches billing.orders' message")
}
