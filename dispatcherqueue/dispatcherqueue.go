// Package dispatcherqueue is the contract of an endpoint's TimeoutsDispatcher queue: each message
// carries the id of one due timeout as its payload (UTF-8, at most persistence.MaxIDLength
// bytes). The poller publishes ids there in batches; the dispatch satellite decodes them.
package dispatcherqueue

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ErrMalformed is returned by Decode for a message that does not carry a usable timeout id.
var ErrMalformed = errors.New("dispatcherqueue: malformed message")

// NewMessage returns the message that announces the timeout id as due.
func NewMessage(id string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(id))
}

// Decode returns the timeout id a dispatcher message carries.
func Decode(msg *message.Message) (string, error) {
	id := string(msg.Payload)
	switch {
	case id == "":
		return "", fmt.Errorf("%w: empty payload, expected a timeout id", ErrMalformed)
	case len(id) > persistence.MaxIDLength:
		return "", fmt.Errorf("%w: payload of %d bytes is longer than a timeout id (%d)", ErrMalformed, len(id), persistence.MaxIDLength)
	case !utf8.ValidString(id):
		return "", fmt.Errorf("%w: payload is not valid UTF-8", ErrMalformed)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: payload %q contains a control character", ErrMalformed, id)
		}
	}
	return id, nil
}

// DefaultBatchSize is how many ids Publisher hands the underlying publisher in one call.
const DefaultBatchSize = 100

// Publisher publishes due ids to one endpoint's dispatcher queue.
type Publisher struct {
	pub       message.Publisher
	topic     string
	batchSize int
}

// NewPublisher returns a Publisher for endpoint's dispatcher queue. batchSize <= 0 means
// DefaultBatchSize.
func NewPublisher(pub message.Publisher, endpoint string, batchSize int) *Publisher {
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	return &Publisher{pub: pub, topic: wire.DispatcherQueue(endpoint), batchSize: batchSize}
}

// Topic is the dispatcher queue's name.
func (p *Publisher) Topic() string { return p.topic }

// PublishDue publishes one message per id, batchSize messages per call to the underlying
// publisher. On error, the ids of failed batches are not announced; their claims' leases will run
// out and the poller claims them again.
func (p *Publisher) PublishDue(ctx context.Context, ids []string) error {
	for start := 0; start < len(ids); start += p.batchSize {
		end := min(start+p.batchSize, len(ids))
		msgs := make([]*message.Message, 0, end-start)
		for _, id := range ids[start:end] {
			m := NewMessage(id)
			m.SetContext(ctx)
			msgs = append(msgs, m)
		}
		if err := p.pub.Publish(p.topic, msgs...); err != nil {
			return fmt.Errorf("publishing %d due ids to %s: %w", len(msgs), p.topic, err)
		}
	}
	return nil
}
