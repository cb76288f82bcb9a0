package nativedelay_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/wire"
)

// bits writes the 28 words of a routing key from the digits given for the low levels: bits("101")
// is 25 zeros then 1, 0, 1.
func bits(low string) string {
	all := strings.Repeat("0", nativedelay.Levels-len(low)) + low
	return strings.Join(strings.Split(all, ""), ".") + "."
}

func TestRoutingKeyKnownAnswers(t *testing.T) {
	t.Parallel()
	const max = nativedelay.MaxDelaySeconds
	for _, tt := range []struct {
		name  string
		delay time.Duration
		dest  string
		level int
		key   string
	}{
		{"0 s goes straight to delivery", 0, "orders", -1, bits("") + "orders"},
		{"negative is 0", -5 * time.Minute, "orders", -1, bits("") + "orders"},
		{"1 s", time.Second, "orders", 0, bits("1") + "orders"},
		{"a microsecond rounds up to 1 s", time.Microsecond, "orders", 0, bits("1") + "orders"},
		{"less than a microsecond is the rounding of a due time, not a delay", 999 * time.Nanosecond, "orders", -1, bits("") + "orders"},
		{"2 s and the rounding of a due time is 2 s", 2*time.Second + 999*time.Nanosecond, "orders", 1, bits("10") + "orders"},
		{"2 s and a microsecond rounds up to 3 s", 2*time.Second + time.Microsecond, "orders", 1, bits("11") + "orders"},
		{"2 s", 2 * time.Second, "orders", 1, bits("10") + "orders"},
		{"3 s", 3 * time.Second, "orders", 1, bits("11") + "orders"},
		{"2.5 s rounds up to 3", 2500 * time.Millisecond, "orders", 1, bits("11") + "orders"},
		{"10 s", 10 * time.Second, "orders", 3, bits("1010") + "orders"},
		{"15 s", 15 * time.Second, "orders", 3, bits("1111") + "orders"},
		{"28 s", 28 * time.Second, "orders", 4, bits("11100") + "orders"},
		{"max-1", (max - 1) * time.Second, "orders", 27, strings.Repeat("1.", 27) + "0.orders"},
		{"max", max * time.Second, "orders", 27, strings.Repeat("1.", 28) + "orders"},
		{"dotted destination", 5 * time.Second, "sales.orders.v2", 2, bits("101") + "sales.orders.v2"},
		{"non-ASCII destination", 5 * time.Second, "commandes-été.注文", 2, bits("101") + "commandes-été.注文"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seconds, err := nativedelay.Seconds(tt.delay)
			require.NoError(t, err)
			require.Equal(t, tt.level, nativedelay.Level(seconds))
			key, err := nativedelay.RoutingKey(seconds, tt.dest)
			require.NoError(t, err)
			require.Equal(t, tt.key, key)
			gotSeconds, gotDest, err := nativedelay.ParseRoutingKey(key)
			require.NoError(t, err)
			require.Equal(t, seconds, gotSeconds)
			require.Equal(t, tt.dest, gotDest)
		})
	}
}

func TestDelayBeyondTheLevelsIsAnErrorNamingTheMaximum(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{
		(nativedelay.MaxDelaySeconds + 1) * time.Second,
		nativedelay.MaxDelay + time.Microsecond, // rounds up past the maximum
		1<<63 - 1,
	} {
		_, err := nativedelay.Seconds(d)
		require.ErrorIs(t, err, nativedelay.ErrDelayTooLong, d)
		require.ErrorContains(t, err, "268,435,455 s")
	}
	_, err := nativedelay.RoutingKey(nativedelay.MaxDelaySeconds+1, "orders")
	require.ErrorIs(t, err, nativedelay.ErrDelayTooLong)
}

func TestDestinationsThatCannotEndARoutingKey(t *testing.T) {
	t.Parallel()
	for _, dest := range []string{
		"",
		strings.Repeat("a", nativedelay.MaxDestinationLength+1),
		"orders.*",
		"#.orders",
		"a.#.b",
		"bad\x00byte",
		"line\nbreak",
		string([]byte{0xff, 0xfe}),
	} {
		_, err := nativedelay.RoutingKey(1, dest)
		require.ErrorIs(t, err, nativedelay.ErrInvalidDestination, "%q", dest)
	}
	key, err := nativedelay.RoutingKey(1, strings.Repeat("a", nativedelay.MaxDestinationLength))
	require.NoError(t, err)
	require.Len(t, key, 255, "the longest destination fills AMQP's routing key exactly")
	for _, dest := range []string{"a*", "#hash", ".x", "o.r.d.e.r.s"} {
		_, err := nativedelay.RoutingKey(1, dest)
		require.NoError(t, err, "%q", dest)
	}
}

func TestBindingKeys(t *testing.T) {
	t.Parallel()
	stars := func(n int) string { return strings.Repeat("*.", n) }
	require.Equal(t, "1.#", nativedelay.QueueBindingKey(27))
	require.Equal(t, "0.#", nativedelay.NextBindingKey(27))
	require.Equal(t, stars(27)+"1.#", nativedelay.QueueBindingKey(0))
	require.Equal(t, stars(27)+"0.#", nativedelay.NextBindingKey(0), "level 0's exchange to the delivery exchange")
	require.Equal(t, stars(24)+"1.#", nativedelay.QueueBindingKey(3))
	require.Equal(t, stars(28)+"sales.orders", nativedelay.DestinationBindingKey("sales.orders"), "one wildcard per delay bit: exactly this destination")
	require.Equal(t, "#.sales.orders", nativedelay.LegacyDestinationBindingKey("sales.orders"), "NServiceBus's, removed where found")
	require.Equal(t, int64(1000), nativedelay.TTLMillis(0))
	require.Equal(t, int64(134217728000), nativedelay.TTLMillis(27))
}

// matchTopic is RabbitMQ's topic matching: '*' is one word, '#' zero or more.
func matchTopic(pattern, key string) bool {
	var match func(p, k []string) bool
	match = func(p, k []string) bool {
		if len(p) == 0 {
			return len(k) == 0
		}
		switch p[0] {
		case "#":
			for i := 0; i <= len(k); i++ {
				if match(p[1:], k[i:]) {
					return true
				}
			}
			return false
		case "*":
			return len(k) > 0 && match(p[1:], k[1:])
		}
		return len(k) > 0 && p[0] == k[0] && match(p[1:], k[1:])
	}
	return match(strings.Split(pattern, "."), strings.Split(key, "."))
}

// TestRoutingThroughTheLevelsAddsUpToTheDelay walks a message through the bindings as the broker
// would and checks that the queues it waits in add up to the delay.
func TestRoutingThroughTheLevelsAddsUpToTheDelay(t *testing.T) {
	t.Parallel()
	for _, seconds := range []uint32{1, 2, 3, 5, 10, 15, 28, 1000, nativedelay.MaxDelaySeconds - 1, nativedelay.MaxDelaySeconds} {
		key, err := nativedelay.RoutingKey(seconds, "orders")
		require.NoError(t, err)
		var waited int64
		for level := nativedelay.Level(seconds); level >= 0; level-- {
			toQueue := matchTopic(nativedelay.QueueBindingKey(level), key)
			toNext := matchTopic(nativedelay.NextBindingKey(level), key)
			require.True(t, toQueue != toNext, "exactly one binding of level %d routes %s", level, key)
			if toQueue {
				waited += nativedelay.TTLMillis(level) / 1000
			}
		}
		require.Equal(t, int64(seconds), waited)
		require.True(t, matchTopic(nativedelay.DestinationBindingKey("orders"), key))
	}
}

func FuzzRoutingKey(f *testing.F) {
	for _, s := range []string{"orders", "a.b.c", "été", "x"} {
		f.Add(int64(5*time.Second), s)
	}
	f.Add(int64(-1), "orders")
	f.Add(int64(nativedelay.MaxDelay), "orders")
	f.Add(int64(nativedelay.MaxDelay)+1, "orders")
	f.Fuzz(func(t *testing.T, delay int64, dest string) {
		seconds, err := nativedelay.Seconds(time.Duration(delay))
		if err != nil {
			require.ErrorIs(t, err, nativedelay.ErrDelayTooLong)
			require.Greater(t, time.Duration(delay), nativedelay.MaxDelay-time.Second)
			return
		}
		// Less than wire.Precision over whole seconds is the rounding up of a due time: not a second more.
		require.Greater(t, time.Duration(seconds)*time.Second, time.Duration(delay)-wire.Precision, "never early")
		require.Less(t, time.Duration(seconds)*time.Second-time.Duration(max(delay, 0)), time.Second, "less than a second late")
		level := nativedelay.Level(seconds)
		require.True(t, level >= -1 && level < nativedelay.Levels)
		key, err := nativedelay.RoutingKey(seconds, dest)
		if err != nil {
			require.ErrorIs(t, err, nativedelay.ErrInvalidDestination)
			return
		}
		require.LessOrEqual(t, len(key), 255)
		require.True(t, utf8.ValidString(key))
		gotSeconds, gotDest, err := nativedelay.ParseRoutingKey(key)
		require.NoError(t, err)
		require.Equal(t, seconds, gotSeconds)
		require.Equal(t, dest, gotDest)
		if level >= 0 {
			require.True(t, matchTopic(nativedelay.QueueBindingKey(level), key), "enters the queue of its highest bit")
		}
	})
}
