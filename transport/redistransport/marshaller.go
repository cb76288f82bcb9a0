package redistransport

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/vmihailenco/msgpack"
)

// HeaderUnreadableMetadata carries, on a message whose "metadata" field could not be read, why
// not. The message has no usable routing headers then, so the satellites move it to the error
// queue, where this header tells a person what was wrong.
const HeaderUnreadableMetadata = "redis.unreadable-metadata"

// The fields of watermill-redisstream's format.
const (
	fieldUUID     = redisstream.UUIDHeaderKey
	fieldPayload  = "payload"
	fieldMetadata = "metadata"
)

// marshaller writes watermill-redisstream's format and reads it, or an entry whose headers are
// fields of their own, without ever failing: a read that failed would stop the subscription.
type marshaller struct {
	redisstream.DefaultMarshallerUnmarshaller
}

// Unmarshal reads an entry.
func (marshaller) Unmarshal(values map[string]any) (*message.Message, error) {
	uuid := stringOf(values[fieldUUID])
	if uuid == "" {
		uuid = watermill.NewUUID()
	}
	msg := message.NewMessage(uuid, []byte(stringOf(values[fieldPayload])))
	for k, v := range values {
		switch k {
		case fieldUUID, fieldPayload, fieldMetadata:
		default:
			msg.Metadata.Set(k, stringOf(v))
		}
	}
	if md := stringOf(values[fieldMetadata]); md != "" {
		var headers map[string]string
		if err := msgpack.Unmarshal([]byte(md), &headers); err != nil {
			msg.Metadata.Set(HeaderUnreadableMetadata, fmt.Sprintf("the %q field is not a MessagePack map of strings: %v", fieldMetadata, err))
		}
		for k, v := range headers {
			msg.Metadata.Set(k, v)
		}
	}
	return msg, nil
}

// stringOf is a field's value: go-redis reads every field as a string.
func stringOf(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case []byte:
		return string(v)
	default:
		return fmt.Sprint(v)
	}
}
