package nativedelay_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
)

// FuzzParseRoutingKey reads arbitrary routing keys, as a delivery exchange may receive them from
// any producer: no panic; a key it accepts is exactly the key RoutingKey builds for its delay and
// destination, it reaches that destination's binding and no other destination's (not even one
// its name ends in: see TestDotSuffixDestinationsDoNotShareMessages), and it enters the level
// queue of its highest bit.
func FuzzParseRoutingKey(f *testing.F) {
	key, err := nativedelay.RoutingKey(5, "orders")
	require.NoError(f, err)
	for _, s := range []string{key, key[:55], strings.Replace(key, "1", "2", 1), key + ".#", key[:56] + "*.x", key[:56] + "a..b", ""} {
		f.Add(s, "orders")
	}
	f.Fuzz(func(t *testing.T, key, other string) {
		seconds, dest, err := nativedelay.ParseRoutingKey(key)
		if err != nil {
			require.ErrorIs(t, err, nativedelay.ErrInvalidDestination)
			return
		}
		require.LessOrEqual(t, seconds, uint32(nativedelay.MaxDelaySeconds))
		built, err := nativedelay.RoutingKey(seconds, dest)
		require.NoError(t, err)
		require.Equal(t, key, built, "accepted keys round-trip")
		require.True(t, matchTopic(nativedelay.DestinationBindingKey(dest), key), "reaches its destination")
		if other != dest && nativedelay.ValidateDestination(other) == nil {
			require.False(t, matchTopic(nativedelay.DestinationBindingKey(other), key), "%q's binding catches a message for %q", other, dest)
		}
		if level := nativedelay.Level(seconds); level >= 0 {
			require.True(t, matchTopic(nativedelay.QueueBindingKey(level), key), "enters the queue of its highest bit")
		}
	})
}

// TestDotSuffixDestinationsDoNotShareMessages is what the fuzz test above found with
// NServiceBus's binding "#.<destination>": a message for "billing.orders" also matched the binding
// of "orders", so where both queues were bound to the delivery exchange it was delivered to both.
// The binding of 28 single-word wildcards and the destination matches only keys for exactly that
// destination; the legacy binding still shows the bug.
func TestDotSuffixDestinationsDoNotShareMessages(t *testing.T) {
	t.Parallel()
	key, err := nativedelay.RoutingKey(5, "billing.orders")
	require.NoError(t, err)
	require.False(t, matchTopic(nativedelay.DestinationBindingKey("orders"), key), "orders' binding catches billing.orders' message")
	require.True(t, matchTopic(nativedelay.DestinationBindingKey("billing.orders"), key))
	require.True(t, matchTopic(nativedelay.LegacyDestinationBindingKey("orders"), key), "the legacy binding is why it is removed")
	key, err = nativedelay.RoutingKey(5, "orders")
	require.NoError(t, err)
	require.False(t, matchTopic(nativedelay.DestinationBindingKey("billing.orders"), key))
	require.False(t, matchTopic(nativedelay.DestinationBindingKey("0.orders"), key), "a destination starting with a bit's word is not caught either")
}
