package dispatcherqueue_test

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
)

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "id-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	return out
}

func TestOneIDIsTheOriginalFormat(t *testing.T) {
	m := dispatcherqueue.Encode("order-42")
	require.Equal(t, "order-42", string(m.Payload))
	require.NotContains(t, m.Metadata, dispatcherqueue.HeaderDispatchIDs, "older dispatch satellites read it")

	got, err := dispatcherqueue.Decode(message.NewMessage(watermill.NewUUID(), []byte("written by hand, with spaces")))
	require.NoError(t, err)
	require.Equal(t, []string{"written by hand, with spaces"}, got, "a one-id message of an older poller or another producer")
}

func TestManyIDsRoundTrip(t *testing.T) {
	want := []string{"a", "order 42", "ü-ÿ", strings.Repeat("x", 250)}
	m := dispatcherqueue.Encode(want...)
	require.Equal(t, "4", m.Metadata.Get(dispatcherqueue.HeaderDispatchIDs))
	got, err := dispatcherqueue.Decode(m)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestManyIDsAreMalformedWithoutTheirHeader is what a dispatch satellite that knows only the
// one-id format sees: not an id it would look up and ack as gone, but a malformed message for
// the error queue, its timeouts left in the store for their lease to run out.
func TestManyIDsAreMalformedWithoutTheirHeader(t *testing.T) {
	m := dispatcherqueue.Encode(ids(3)...)
	delete(m.Metadata, dispatcherqueue.HeaderDispatchIDs)
	_, err := dispatcherqueue.Decode(m)
	require.ErrorIs(t, err, dispatcherqueue.ErrMalformed)
}

func TestMalformedDispatcherMessages(t *testing.T) {
	for name, tc := range map[string]struct {
		count, payload string
	}{
		"count not a number":      {"two", "a\nb\n"},
		"count zero":              {"0", ""},
		"count above the maximum": {"1001", strings.Repeat("a\n", 1001)},
		"count too small":         {"1", "a\nb\n"},
		"count too large":         {"3", "a\nb\n"},
		"no final line feed":      {"2", "a\nb"},
		"an empty id":             {"2", "a\n\n"},
		"a control character":     {"2", "a\nb\tc\n"},
		"an id too long":          {"2", "a\n" + strings.Repeat("x", 251) + "\n"},
		"not UTF-8":               {"2", "a\n\xff\n"},
	} {
		m := message.NewMessage(watermill.NewUUID(), []byte(tc.payload))
		m.Metadata.Set(dispatcherqueue.HeaderDispatchIDs, tc.count)
		_, err := dispatcherqueue.Decode(m)
		require.ErrorIs(t, err, dispatcherqueue.ErrMalformed, name)
	}
	for name, payload := range map[string]string{"empty": "", "too long": strings.Repeat("x", 251), "control": "a\nb"} {
		_, err := dispatcherqueue.Decode(message.NewMessage(watermill.NewUUID(), []byte(payload)))
		require.ErrorIs(t, err, dispatcherqueue.ErrMalformed, name)
	}
}
