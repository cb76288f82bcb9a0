package natstransport

import (
	"fmt"
	"strings"

	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
)

// marshaler is watermill-nats' NATSMarshaler (headers as NATS headers), refusing headers that
// NATS would change and reading every message, so that a message a handler cannot take ends on
// the error queue rather than being delivered again for ever.
type marshaler struct{}

// Marshal refuses a header NATS cannot carry unchanged.
func (marshaler) Marshal(topic string, msg *message.Message) (*nats.Msg, error) {
	for k, v := range msg.Metadata {
		switch {
		case k == "" || strings.ContainsAny(k, ":\r\n \t"):
			return nil, fmt.Errorf("natstransport: message %s: header name %q cannot travel as a NATS header (no ':', whitespace or line breaks)", msg.UUID, k)
		case strings.ContainsAny(v, "\r\n"):
			return nil, fmt.Errorf("natstransport: message %s: header %q: a NATS header value cannot hold a line break", msg.UUID, k)
		case strings.HasPrefix(v, " ") || strings.HasPrefix(v, "\t"):
			return nil, fmt.Errorf("natstransport: message %s: header %q: NATS drops the spaces a header value starts with", msg.UUID, k)
		}
	}
	return (&wnats.NATSMarshaler{}).Marshal(topic, msg)
}

// Unmarshal reads any message: values of a header sent more than once are joined by ", ".
func (marshaler) Unmarshal(m *nats.Msg) (*message.Message, error) {
	msg := message.NewMessage(m.Header.Get(wnats.WatermillUUIDHdr), m.Data)
	for k, v := range m.Header {
		switch k {
		case wnats.WatermillUUIDHdr, nats.MsgIdHdr, nats.ExpectedLastMsgIdHdr, nats.ExpectedStreamHdr, nats.ExpectedLastSubjSeqHdr, nats.ExpectedLastSeqHdr:
		default:
			msg.Metadata.Set(k, strings.Join(v, ", "))
		}
	}
	return msg, nil
}
