package natstransport

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestMarshalerCarriesEveryHeaderNATSWouldRefuseOrChange(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("id-1", []byte("body"))
	headers := map[string]string{
		"plain":      "value with\ttab",
		"ключ":       "значение",
		"emoji-🔑":    "v",
		"has:colon":  "v",
		"line-break": "a\r\nb",
		"leading":    "  spaces",
		"empty":      "",
	}
	for k, v := range headers {
		msg.Metadata.Set(k, v)
	}
	m, err := marshaler{}.Marshal("t", msg)
	require.NoError(t, err)
	for k := range m.Header {
		for i := 0; i < len(k); i++ {
			require.True(t, k[i] > ' ' && k[i] < 0x7f && k[i] != ':', "header name %q goes on the wire as it is", k)
		}
	}
	require.Equal(t, "value with\ttab", m.Header.Get("plain"), "what NATS carries is not encoded")
	got, err := marshaler{}.Unmarshal(m)
	require.NoError(t, err)
	require.Equal(t, "id-1", got.UUID)
	require.Equal(t, message.Metadata(headers), got.Metadata)
}

func TestUnmarshalerNeverFails(t *testing.T) {
	t.Parallel()
	m := nats.NewMsg("t")
	m.Header.Add("twice", "a")
	m.Header.Add("twice", "b")
	m.Header.Set(EncodedHeaderPrefix+"!!!", "not base64")
	got, err := marshaler{}.Unmarshal(m)
	require.NoError(t, err)
	require.Empty(t, got.UUID, "no UUID: the store satellite gives it one")
	require.Equal(t, "a, b", got.Metadata.Get("twice"))
	require.Equal(t, "not base64", got.Metadata.Get(EncodedHeaderPrefix+"!!!"), "kept as it came")
}

func TestNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "orders_Timeouts", StreamName("orders.Timeouts"))
	require.Equal(t, "timeoutmill_orders_Timeouts", Config{}.ConsumerName("orders.Timeouts"))
	require.NoError(t, Config{URL: "nats://a:b@h:4222,nats://h2:4222"}.Validate())
	require.ErrorIs(t, Config{}.Validate(), ErrInvalidConfig)
	require.ErrorIs(t, Config{URL: "http://h"}.Validate(), ErrInvalidConfig)
	require.ErrorIs(t, Config{URL: "nats://h", Durable: "a.b"}.Validate(), ErrInvalidConfig)
	require.False(t, strings.Contains(StreamName("a b*>.c"), " "))
}

func TestUnmarshalerLeavesOutTheServersScheduleHeaders(t *testing.T) {
	t.Parallel()
	m := nats.NewMsg("orders")
	m.Header.Set("Nats-Scheduler", "timeoutmill.schedules.abc")
	m.Header.Set("Nats-Schedule-Next", "purge")
	m.Header.Set("Nats-Schedule", "@at 2026-01-01T00:00:00Z")
	m.Header.Set("Nats-Schedule-Target", "orders")
	m.Header.Set("timeout.due", "2026-01-01T00:00:00.000001Z")
	m.Header.Set("Nats-Something-Else", "kept")
	got, err := marshaler{}.Unmarshal(m)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"timeout.due":         "2026-01-01T00:00:00.000001Z",
		"Nats-Something-Else": "kept",
	}, map[string]string(got.Metadata), "a copy of this metadata published again must not be a schedule")
}
