package redistransport

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

func TestMarshallerRoundTripsWatermillsFormat(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("id-1", []byte{0, 0xff, 'x'})
	msg.Metadata.Set("ключ", "значение\r\nwith a line break")
	values, err := marshaller{}.Marshal("t", msg)
	require.NoError(t, err)
	// Redis hands every field back as a string.
	fields := map[string]any{}
	for k, v := range values {
		switch v := v.(type) {
		case []byte:
			fields[k] = string(v)
		default:
			fields[k] = v
		}
	}
	got, err := marshaller{}.Unmarshal(fields)
	require.NoError(t, err)
	require.Equal(t, "id-1", got.UUID)
	require.Equal(t, msg.Payload, got.Payload)
	require.Equal(t, msg.Metadata, got.Metadata)
}

func TestMarshallerReadsWhatAPlainProducerWritesAndNeverFails(t *testing.T) {
	t.Parallel()
	got, err := marshaller{}.Unmarshal(map[string]any{
		"payload": "charge order 42", "timeout.expire": "2030-01-02T15:04:05Z", "timeout.destination": "payments",
	})
	require.NoError(t, err)
	require.NotEmpty(t, got.UUID, "an entry without a UUID gets one")
	require.Equal(t, "charge order 42", string(got.Payload))
	require.Equal(t, "payments", got.Metadata.Get("timeout.destination"))

	got, err = marshaller{}.Unmarshal(map[string]any{"_watermill_message_uuid": "bad", "metadata": "\xc1 not msgpack"})
	require.NoError(t, err)
	require.Equal(t, "bad", got.UUID)
	require.Contains(t, got.Metadata.Get(HeaderUnreadableMetadata), "MessagePack")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{URL: "redis://127.0.0.1:6379/0"}.Validate())
	require.ErrorIs(t, Config{}.Validate(), ErrInvalidConfig)
	require.ErrorIs(t, Config{URL: "http://x"}.Validate(), ErrInvalidConfig)
	require.ErrorIs(t, Config{URL: "redis://h/0", Consumers: 1000}.Validate(), ErrInvalidConfig)
	require.ErrorIs(t, Config{URL: "redis://h/0", ClaimAfter: -1}.Validate(), ErrInvalidConfig)
}
