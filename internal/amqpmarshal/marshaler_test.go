package amqpmarshal

import (
	"bytes"
	"math"
	"testing"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/wire"
)

func TestMarshalRoundTrip(t *testing.T) {
	t.Parallel()
	payload := bytes.Repeat([]byte{0, 1, 2, 0xff}, 1024)
	msg := message.NewMessage("a7c1a2f0-uuid", payload)
	msg.Metadata.Set("trace", "ünïcödé ✓ 日本")
	msg.Metadata.Set(wire.HeaderExpire, "2030-01-02T03:04:05.123456Z")
	msg.Metadata.Set(wire.HeaderDestination, "payments")
	msg.Metadata.Set("empty", "")

	p, err := Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	require.Equal(t, amqp.Persistent, p.DeliveryMode)
	require.Equal(t, "a7c1a2f0-uuid", p.MessageId, "the UUID is the AMQP message-id too, for non-Watermill consumers")
	require.Equal(t, "a7c1a2f0-uuid", p.Headers[UUIDHeader])
	for k, v := range p.Headers {
		require.IsType(t, "", v, "header %s", k)
	}

	got, err := Marshaler{}.Unmarshal(delivery(p))
	require.NoError(t, err)
	require.Equal(t, msg.UUID, got.UUID)
	require.Equal(t, payload, []byte(got.Payload))
	require.Equal(t, msg.Metadata, got.Metadata)
}

func TestMarshalDropsTheRedeliveredFlag(t *testing.T) {
	t.Parallel()
	// watermill-amqp marks a redelivered message in its metadata; a stored and forwarded message
	// must not carry that mark to its destination.
	msg := message.NewMessage("id", nil)
	msg.Metadata.Set(wamqp.MetadataRedeliveredKey, "true")
	msg.Metadata.Set("kept", "yes")
	p, err := Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	require.NotContains(t, p.Headers, wamqp.MetadataRedeliveredKey)
	require.Equal(t, "yes", p.Headers["kept"])
}

func TestUnmarshalConvertsEveryFieldType(t *testing.T) {
	t.Parallel()
	stamp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	d := amqp.Delivery{
		Headers: amqp.Table{
			"bool":      true,
			"int8":      int8(-8),
			"uint8":     uint8(200),
			"int16":     int16(-16000),
			"uint16":    uint16(65000),
			"int32":     int32(-2_000_000_000),
			"uint32":    uint32(4_000_000_000),
			"int64":     int64(math.MinInt64),
			"float32":   float32(1.5),
			"float64":   0.1,
			"bigfloat":  1e21,
			"decimal":   amqp.Decimal{Scale: 2, Value: -12345},
			"decimal0":  amqp.Decimal{Scale: 0, Value: 7},
			"bytes":     []byte("raw\x00bytes\xff"),
			"timestamp": stamp,
			"void":      nil,
			"array":     []any{"a", int32(1), true, nil, []byte("b"), 2.5},
			"table":     amqp.Table{"k": "v", "n": int64(3), "nested": amqp.Table{"d": amqp.Decimal{Scale: 1, Value: 5}}},
			"nan":       []any{math.NaN()},
			"string":    "plain",
		},
	}
	msg, err := Marshaler{}.Unmarshal(d)
	require.NoError(t, err)
	require.Equal(t, message.Metadata{
		"bool":      "true",
		"int8":      "-8",
		"uint8":     "200",
		"int16":     "-16000",
		"uint16":    "65000",
		"int32":     "-2000000000",
		"uint32":    "4000000000",
		"int64":     "-9223372036854775808",
		"float32":   "1.5",
		"float64":   "0.1",
		"bigfloat":  "1e+21",
		"decimal":   "-123.45",
		"decimal0":  "7",
		"bytes":     "raw\x00bytes\xff",
		"timestamp": "2030-01-02T02:04:05Z",
		"void":      "",
		"array":     `["a",1,true,null,"b",2.5]`,
		"table":     `{"k":"v","n":3,"nested":{"d":0.5}}`,
		"nan":       `["NaN"]`,
		"string":    "plain",
	}, msg.Metadata)
}

func TestUnmarshalStripsBrokerHeaders(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{
		Headers: amqp.Table{
			"x-death": []any{amqp.Table{
				"count": int64(1), "reason": "expired", "queue": "q", "exchange": "",
				"routing-keys": []any{"q"}, "time": time.Now(),
			}},
			"x-first-death-exchange":     "",
			"x-first-death-queue":        "q",
			"x-first-death-reason":       "expired",
			"x-last-death-exchange":      "",
			"x-last-death-queue":         "q",
			"x-last-death-reason":        "expired",
			"x-delivery-count":           int64(3),
			"x-received-from":            []any{amqp.Table{"uri": "amqp://elsewhere"}},
			wamqp.MetadataRedeliveredKey: "true",
			"x-request-id":               "a user's header that merely starts with x-",
			wire.HeaderExpire:            "2030-01-01T00:00:00Z",
		},
	}
	msg, err := Marshaler{}.Unmarshal(d)
	require.NoError(t, err)
	require.Equal(t, message.Metadata{
		"x-request-id":    "a user's header that merely starts with x-",
		wire.HeaderExpire: "2030-01-01T00:00:00Z",
	}, msg.Metadata)
}

func TestUnmarshalUUIDFallbacks(t *testing.T) {
	t.Parallel()
	m := Marshaler{}
	msg, err := m.Unmarshal(amqp.Delivery{MessageId: "from-plain-client", Headers: amqp.Table{}})
	require.NoError(t, err)
	require.Equal(t, "from-plain-client", msg.UUID, "the AMQP message-id identifies a message without a UUID header")

	msg, err = m.Unmarshal(amqp.Delivery{MessageId: "mid", Headers: amqp.Table{UUIDHeader: "uuid"}})
	require.NoError(t, err)
	require.Equal(t, "uuid", msg.UUID, "the UUID header wins")
	require.NotContains(t, msg.Metadata, UUIDHeader)

	msg, err = m.Unmarshal(amqp.Delivery{Headers: amqp.Table{UUIDHeader: []byte("bytes-uuid")}})
	require.NoError(t, err)
	require.Equal(t, "bytes-uuid", msg.UUID, "a UUID sent as a byte array")

	msg, err = m.Unmarshal(amqp.Delivery{Headers: amqp.Table{UUIDHeader: int64(42)}})
	require.NoError(t, err)
	require.Equal(t, "42", msg.UUID, "a non-string UUID is converted, not a reason to fail")

	msg, err = m.Unmarshal(amqp.Delivery{MessageId: "mid", Headers: amqp.Table{UUIDHeader: ""}})
	require.NoError(t, err)
	require.Equal(t, "mid", msg.UUID)

	msg, err = m.Unmarshal(amqp.Delivery{Body: []byte("x")})
	require.NoError(t, err)
	require.Empty(t, msg.UUID, "nothing to go by: the store satellite assigns an id")
	require.Equal(t, "x", string(msg.Payload))
	require.NotNil(t, msg.Metadata)
}

func TestPropertiesSurviveAsMetadata(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		CorrelationId:   "corr-1",
		ReplyTo:         "replies",
		Type:            "OrderPlaced",
		AppId:           "legacy-app",
		DeliveryMode:    amqp.Transient,
		Priority:        3,
		Headers:         amqp.Table{"h": "v"},
	}
	msg, err := Marshaler{}.Unmarshal(d)
	require.NoError(t, err)
	require.Equal(t, message.Metadata{
		"h":                     "v",
		PropertyContentType:     "application/json",
		PropertyContentEncoding: "gzip",
		PropertyCorrelationID:   "corr-1",
		PropertyReplyTo:         "replies",
		PropertyType:            "OrderPlaced",
		PropertyAppID:           "legacy-app",
	}, msg.Metadata)

	p, err := Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	require.Equal(t, "application/json", p.ContentType)
	require.Equal(t, "gzip", p.ContentEncoding)
	require.Equal(t, "corr-1", p.CorrelationId)
	require.Equal(t, "replies", p.ReplyTo)
	require.Equal(t, "OrderPlaced", p.Type)
	require.Equal(t, "legacy-app", p.AppId)
	require.Equal(t, amqp.Table{"h": "v", UUIDHeader: ""}, p.Headers, "properties travel as properties, not headers")
	require.Equal(t, amqp.Persistent, p.DeliveryMode, "forwarded messages are persistent")
}

// delivery is what a consumer receives for p.
func delivery(p amqp.Publishing) amqp.Delivery {
	return amqp.Delivery{
		Headers:         p.Headers,
		ContentType:     p.ContentType,
		ContentEncoding: p.ContentEncoding,
		DeliveryMode:    p.DeliveryMode,
		CorrelationId:   p.CorrelationId,
		ReplyTo:         p.ReplyTo,
		MessageId:       p.MessageId,
		Type:            p.Type,
		AppId:           p.AppId,
		Body:            p.Body,
	}
}
