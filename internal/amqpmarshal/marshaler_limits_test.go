package amqpmarshal

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// maxShortstr is AMQP 0-9-1's limit on a short string: message properties and header names.
const maxShortstr = 255

// requireEncodable fails t unless amqp091 can write p: a short string over 255 bytes makes it
// fail the publish and close the whole connection (FRAME_ERROR), with every publish in flight on it.
func requireEncodable(t *testing.T, p amqp.Publishing) {
	t.Helper()
	for name, v := range map[string]string{
		"content-type": p.ContentType, "content-encoding": p.ContentEncoding, "correlation-id": p.CorrelationId,
		"reply-to": p.ReplyTo, "message-id": p.MessageId, "type": p.Type, "app-id": p.AppId,
	} {
		require.LessOrEqual(t, len(v), maxShortstr, "property %s is %d bytes, more than a short string holds", name, len(v))
	}
	for k := range p.Headers {
		require.LessOrEqual(t, len(k), maxShortstr, "header name of %d bytes", len(k))
	}
}

// TestMarshalKeepsLongValuesOutOfShortStrings: a UUID or property value longer than a short
// string (a hostile producer's UUID header can be any length; the store satellite then sends the
// message to the error queue under that UUID) is carried in a header instead, so publishing it
// neither fails nor takes the connection down, and it reads back unchanged.
func TestMarshalKeepsLongValuesOutOfShortStrings(t *testing.T) {
	t.Parallel()
	long := "id-" + strings.Repeat("x", 300)
	msg := message.NewMessage(long, []byte("body"))
	for _, key := range []string{PropertyContentType, PropertyContentEncoding, PropertyCorrelationID, PropertyReplyTo, PropertyType, PropertyAppID} {
		msg.Metadata.Set(key, key+"-"+strings.Repeat("v", 300))
	}
	msg.Metadata.Set("short", "kept")

	p, err := Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	requireEncodable(t, p)

	got, err := Marshaler{}.Unmarshal(delivery(p))
	require.NoError(t, err)
	require.Equal(t, long, got.UUID)
	require.Equal(t, msg.Metadata, got.Metadata)
}

// TestMarshalRefusesAHeaderNameNoAMQPMessageCanCarry: a header name longer than 255 bytes cannot
// be sent at all; Marshal says so instead of letting the publish break the connection.
func TestMarshalRefusesAHeaderNameNoAMQPMessageCanCarry(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("id", nil)
	msg.Metadata.Set(strings.Repeat("k", 256), "v")
	_, err := Marshaler{}.Marshal(msg)
	require.ErrorContains(t, err, "255")
}
