package amqpmarshal

import (
	"math"
	"testing"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// tableReader turns fuzz bytes into an AMQP header table with every field type amqp091 can
// receive, nested tables and arrays included, and the header names that matter to the marshaler
// (the UUID header, the broker's, the Property* metadata) among arbitrary ones.
type tableReader struct{ data []byte }

func (r *tableReader) byte() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *tableReader) bytes(max int) []byte {
	n := min(int(r.byte())%(max+1), len(r.data))
	b := r.data[:n]
	r.data = r.data[n:]
	return b
}

func (r *tableReader) uint64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(r.byte())
	}
	return v
}

var fuzzKeys = []string{UUIDHeader, "x-death", "x-first-death-queue", "x-delivery-count", wamqp.MetadataRedeliveredKey,
	PropertyContentType, PropertyCorrelationID, PropertyReplyTo, PropertyType, PropertyAppID, PropertyContentEncoding,
	"timeout.expire", "timeout.destination", ""}

func (r *tableReader) key() string {
	if b := r.byte(); b < 64 {
		return fuzzKeys[int(b)%len(fuzzKeys)]
	}
	return string(r.bytes(40))
}

func (r *tableReader) table(depth int) amqp.Table {
	t := amqp.Table{}
	for n := int(r.byte()) % 8; n > 0 && len(r.data) > 0; n-- {
		t[r.key()] = r.value(depth)
	}
	return t
}

func (r *tableReader) value(depth int) any {
	switch tag := r.byte() % 17; tag {
	case 0:
		return string(r.bytes(64))
	case 1:
		return r.bytes(64)
	case 2:
		return r.byte()&1 == 1
	case 3:
		return int8(r.byte())
	case 4:
		return uint8(r.byte())
	case 5:
		return int16(r.uint64())
	case 6:
		return uint16(r.uint64())
	case 7:
		return int32(r.uint64())
	case 8:
		return uint32(r.uint64())
	case 9:
		return int64(r.uint64())
	case 10:
		return math.Float32frombits(uint32(r.uint64()))
	case 11:
		return math.Float64frombits(r.uint64())
	case 12:
		return amqp.Decimal{Scale: r.byte(), Value: int32(r.uint64())}
	case 13:
		return time.Unix(int64(r.uint64()%(1<<40)), 0)
	case 14:
		return nil
	case 15:
		if depth > 3 {
			return nil
		}
		return r.table(depth + 1)
	default:
		if depth > 3 {
			return nil
		}
		var a []any
		for n := int(r.byte()) % 5; n > 0; n-- {
			a = append(a, r.value(depth+1))
		}
		return a
	}
}

// FuzzUnmarshalHeaderTables: whatever header table a producer that is not Watermill sends,
// Unmarshal never fails or panics (an error would make the subscriber nack the message for ever),
// every metadata value is a string, the broker's headers are gone, and what it accepted survives
// a Marshal and an Unmarshal unchanged (the store and dispatch satellites do exactly that), as a
// publishing amqp091 can encode.
func FuzzUnmarshalHeaderTables(f *testing.F) {
	f.Add([]byte{3, 0, 0, 5, 'a', 'b', 'c', 'd', 'e', 200, 3, 'k', 'e', 'y', 9, 1, 2, 3, 4, 5, 6, 7, 8}, "msg-1", "text/plain")
	f.Add([]byte{2, 1, 15, 2, 200, 1, 'n', 16, 3, 0, 1, 'x', 12, 2, 0, 0, 48, 57}, "", "")
	f.Add([]byte{1, 7, 0, 200, 'x', 'x', 'x'}, "id", "application/json")
	f.Add([]byte("10"), "0", "0") // an empty amqp.correlation-id header: an unset property

	f.Fuzz(func(t *testing.T, data []byte, messageID, contentType string) {
		r := &tableReader{data: data}
		headers := r.table(0)
		if len(messageID) > maxShortString || len(contentType) > maxShortString {
			return // not a delivery AMQP can carry
		}
		d := amqp.Delivery{Headers: headers, MessageId: messageID, ContentType: contentType, Body: r.data}
		msg, err := Marshaler{}.Unmarshal(d)
		require.NoError(t, err)
		for k, v := range msg.Metadata {
			require.False(t, IsBrokerHeader(k), "broker header %q kept", k)
			require.NotEqual(t, UUIDHeader, k)
			_ = v // a string by type
		}

		p, err := Marshaler{}.Marshal(msg)
		require.NoError(t, err, "what Unmarshal accepted can be sent on")
		requireEncodable(t, p)
		for k, v := range p.Headers {
			require.IsType(t, "", v, "header %q", k)
		}
		again, err := Marshaler{}.Unmarshal(delivery(p))
		require.NoError(t, err)
		require.Equal(t, msg.UUID, again.UUID)
		require.Equal(t, []byte(msg.Payload), []byte(again.Payload))
		// The Property* keys stand for AMQP properties, where empty means unset: an empty one is
		// not carried. Everything else comes back as it was.
		want := message.Metadata{}
		for k, v := range msg.Metadata {
			if v == "" && isPropertyKey(k) {
				continue
			}
			want[k] = v
		}
		require.Equal(t, want, again.Metadata)
	})
}

func isPropertyKey(k string) bool {
	switch k {
	case PropertyContentType, PropertyContentEncoding, PropertyCorrelationID, PropertyReplyTo, PropertyType, PropertyAppID:
		return true
	}
	return false
}
