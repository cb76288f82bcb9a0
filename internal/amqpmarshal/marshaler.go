// Package amqpmarshal converts between Watermill messages and AMQP messages for
// transport/amqptransport's Publisher and Subscriber and for native/rabbitmq's Publisher, so that
// whatever a producer that is not Watermill sends is delivered (see Marshaler).
package amqpmarshal

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// UUIDHeader carries a Watermill message's UUID, as in watermill-amqp.
const UUIDHeader = wamqp.DefaultMessageUUIDHeaderKey

// Metadata keys that stand for AMQP message properties. A message from a plain AMQP client keeps
// these properties through the timeout manager: Unmarshal puts them in the metadata and Marshal
// turns them back into properties.
const (
	PropertyContentType     = "amqp.content-type"
	PropertyContentEncoding = "amqp.content-encoding"
	PropertyCorrelationID   = "amqp.correlation-id"
	PropertyReplyTo         = "amqp.reply-to"
	PropertyType            = "amqp.type"
	PropertyAppID           = "amqp.app-id"
)

// Marshaler converts between Watermill messages and AMQP messages. Unlike watermill-amqp's
// DefaultMarshaler, its Unmarshal never fails: whatever a producer that is not Watermill sends is
// delivered, because an error there makes the subscriber nack the message forever.
//
// Marshal writes the metadata as string headers, the UUID in UUIDHeader and as the AMQP
// message-id, persistent delivery mode, and the Property* metadata as the AMQP properties they
// name.
//
// Unmarshal reads:
//   - the UUID from UUIDHeader; without it, from the AMQP message-id (so a plain AMQP client's
//     redelivery keeps its id); without both, "" (the store satellite assigns one);
//   - every header as metadata, converted to a string when it is not one: booleans as "true" or
//     "false"; integers in decimal; floats in Go's shortest 'g' form; decimals as "123.45"; byte
//     arrays as their bytes; timestamps in RFC 3339 (UTC); void as ""; arrays and tables as JSON
//     of those conversions;
//   - but not the headers the broker adds: x-death, x-first-death-*, x-last-death-*,
//     x-delivery-count, x-received-from (dead-lettering, quorum queues and shovels add them, and
//     forwarding them would mislead the next consumer), nor watermill-amqp's redelivered flag,
//     which describes one delivery, not the message;
//   - the content-type, content-encoding, correlation-id, reply-to, type and app-id properties
//     into the Property* metadata, when set.
type Marshaler struct{}

var _ wamqp.Marshaler = Marshaler{}

// maxShortString is AMQP 0-9-1's limit on a short string (message properties, header names).
// amqp091 fails a publish that exceeds it and closes the connection, with every publish on it.
const maxShortString = 255

// Marshal converts msg to a persistent AMQP message. A UUID or Property* value longer than a
// short string stays in the headers only; a header name that long cannot be sent and is an error.
func (Marshaler) Marshal(msg *message.Message) (amqp.Publishing, error) {
	p := amqp.Publishing{
		Body:         msg.Payload,
		DeliveryMode: amqp.Persistent,
		Headers:      make(amqp.Table, len(msg.Metadata)+1),
	}
	if len(msg.UUID) <= maxShortString {
		p.MessageId = msg.UUID
	}
	for k, v := range msg.Metadata {
		if len(k) > maxShortString {
			return amqp.Publishing{}, fmt.Errorf("message %.40s…: header name of %d bytes, AMQP allows at most %d", msg.UUID, len(k), maxShortString)
		}
		if k != wamqp.MetadataRedeliveredKey {
			p.Headers[k] = v
		}
	}
	property := func(key string) string {
		v := msg.Metadata[key]
		if len(v) > maxShortString {
			return "" // kept as a header, which Unmarshal reads back into the same metadata
		}
		delete(p.Headers, key)
		return v
	}
	p.ContentType = property(PropertyContentType)
	p.ContentEncoding = property(PropertyContentEncoding)
	p.CorrelationId = property(PropertyCorrelationID)
	p.ReplyTo = property(PropertyReplyTo)
	p.Type = property(PropertyType)
	p.AppId = property(PropertyAppID)
	p.Headers[UUIDHeader] = msg.UUID
	return p, nil
}

// Unmarshal converts an AMQP delivery to a Watermill message. It never returns an error.
func (Marshaler) Unmarshal(d amqp.Delivery) (*message.Message, error) {
	id := ""
	if v, ok := d.Headers[UUIDHeader]; ok {
		id = headerString(v)
	}
	if id == "" {
		id = d.MessageId
	}
	msg := message.NewMessage(id, d.Body)
	msg.Metadata = make(message.Metadata, len(d.Headers)+2)
	for k, v := range d.Headers {
		if k == UUIDHeader || IsBrokerHeader(k) {
			continue
		}
		msg.Metadata[k] = headerString(v)
	}
	for key, v := range map[string]string{
		PropertyContentType:     d.ContentType,
		PropertyContentEncoding: d.ContentEncoding,
		PropertyCorrelationID:   d.CorrelationId,
		PropertyReplyTo:         d.ReplyTo,
		PropertyType:            d.Type,
		PropertyAppID:           d.AppId,
	} {
		if v != "" {
			msg.Metadata[key] = v
		}
	}
	return msg, nil
}

// IsBrokerHeader reports whether a header is one that RabbitMQ (or watermill-amqp) adds to a
// message rather than its producer; Unmarshal drops these.
func IsBrokerHeader(key string) bool {
	switch key {
	case "x-death",
		"x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
		"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason",
		"x-delivery-count", "x-received-from",
		wamqp.MetadataRedeliveredKey:
		return true
	}
	return false
}

// headerString converts an AMQP field value to the string Unmarshal documents.
func headerString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	case amqp.Table, []any:
		b, err := json.Marshal(jsonValue(v))
		if err != nil {
			// Unreachable for what jsonValue returns; still never fail.
			return fmt.Sprint(v)
		}
		return string(b)
	}
	return scalarString(v)
}

func scalarString(v any) string {
	switch v := v.(type) {
	case bool:
		return strconv.FormatBool(v)
	case int8:
		return strconv.FormatInt(int64(v), 10)
	case int16:
		return strconv.FormatInt(int64(v), 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.FormatInt(int64(v), 10)
	case uint8:
		return strconv.FormatUint(uint64(v), 10)
	case uint16:
		return strconv.FormatUint(uint64(v), 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case amqp.Decimal:
		return decimalString(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

// decimalString renders an AMQP decimal (Value × 10^-Scale) exactly.
func decimalString(d amqp.Decimal) string {
	r := new(big.Rat).SetFrac(big.NewInt(int64(d.Value)), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale)), nil))
	return r.FloatString(int(d.Scale))
}

// jsonValue turns a nested AMQP value into one encoding/json renders as documented: strings
// stay strings, numbers and booleans stay JSON numbers and booleans, the rest become strings.
func jsonValue(v any) any {
	switch v := v.(type) {
	case amqp.Table:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonValue(e)
		}
		return out
	case string, bool, nil:
		return v
	case []byte:
		return string(v)
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, amqp.Decimal:
		return json.Number(scalarString(v))
	case float32, float64:
		s := scalarString(v)
		if _, err := strconv.ParseFloat(s, 64); err != nil || s == "NaN" || s == "+Inf" || s == "-Inf" {
			return s // JSON has no NaN or infinities
		}
		return json.Number(s)
	}
	return scalarString(v)
}
