package natstransport

import (
	"encoding/base64"
	"strings"

	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
)

// EncodedHeaderPrefix starts the name of a header that NATS could not carry as it is (see the
// package documentation): the rest of the name is the original name in unpadded base64url, and
// the value the original value in standard base64.
const EncodedHeaderPrefix = "_timeoutmill_b64_"

// scheduleHeaderPrefix starts the headers of JetStream's message schedules: Nats-Schedule,
// Nats-Schedule-Target, Nats-Schedule-Next, Nats-Scheduler and the rest.
const scheduleHeaderPrefix = "Nats-Schedul"

// marshaler is watermill-nats' NATSMarshaler (headers as NATS headers) with the headers NATS
// would refuse or change encoded, and a reader that takes every message, so that a message a
// handler cannot use ends on the error queue rather than being delivered again for ever.
type marshaler struct{}

// Marshal writes msg as a NATS message.
func (marshaler) Marshal(topic string, msg *message.Message) (*nats.Msg, error) {
	out := msg
	for k, v := range msg.Metadata {
		if carriable(k, v) {
			continue
		}
		if out == msg {
			out = msg.Copy()
		}
		delete(out.Metadata, k)
		out.Metadata.Set(EncodedHeaderPrefix+base64.RawURLEncoding.EncodeToString([]byte(k)), base64.StdEncoding.EncodeToString([]byte(v)))
	}
	return (&wnats.NATSMarshaler{}).Marshal(topic, out)
}

// carriable: NATS headers take printable ASCII names without ':' and values without line breaks,
// and drop the spaces a value starts with.
func carriable(name, value string) bool {
	if name == "" || strings.HasPrefix(name, EncodedHeaderPrefix) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return !strings.ContainsAny(value, "\r\n") && !strings.HasPrefix(value, " ") && !strings.HasPrefix(value, "\t")
}

// Unmarshal reads any message: values of a header sent more than once are joined by ", ", and an
// encoded header that does not decode is kept as it came. The server's own headers of a message
// schedule (Nats-Scheduler, Nats-Schedule-Next, ...) are left out: a handler that copies the
// metadata onto a message it publishes must not make it a schedule, or have it refused by a
// stream without schedules.
func (marshaler) Unmarshal(m *nats.Msg) (*message.Message, error) {
	msg := message.NewMessage(m.Header.Get(wnats.WatermillUUIDHdr), m.Data)
	for k, v := range m.Header {
		switch k {
		case wnats.WatermillUUIDHdr, nats.MsgIdHdr, nats.ExpectedLastMsgIdHdr, nats.ExpectedStreamHdr, nats.ExpectedLastSubjSeqHdr, nats.ExpectedLastSeqHdr:
			continue
		}
		if strings.HasPrefix(k, scheduleHeaderPrefix) {
			continue
		}
		value := strings.Join(v, ", ")
		if encoded, ok := strings.CutPrefix(k, EncodedHeaderPrefix); ok {
			name, nerr := base64.RawURLEncoding.DecodeString(encoded)
			decoded, verr := base64.StdEncoding.DecodeString(value)
			if nerr == nil && verr == nil {
				k, value = string(name), string(decoded)
			}
		}
		msg.Metadata.Set(k, value)
	}
	return msg, nil
}
