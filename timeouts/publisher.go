package timeouts

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// Publisher decorates a message.Publisher. A message marked for delay (DeliverAt, DeliverAfter,
// or Watermill's delay.Message) that is not yet due goes to the endpoint's Timeouts queue. It
// carries the wire.HeaderExpire and wire.HeaderDestination headers. Any other message, and one
// already due, goes straight to its topic. The caller's messages are not modified.
type Publisher struct {
	next     message.Publisher
	timeouts string
	now      func() time.Time // the time relative delays count from
	reached  func() time.Time // a message due at or before it goes straight to its topic
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher that routes delayed messages through endpoint's Timeouts
// queue. The endpoint need not be in this process. Any process running its satellites (a
// Manager or the timeoutmill command) delivers them.
func NewPublisher(next message.Publisher, endpoint string) (*Publisher, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: NewPublisher needs a publisher to decorate", ErrInvalidConfig)
	}
	if err := wireparse.ValidateName("endpoint", endpoint); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Publisher{next: next, timeouts: wire.TimeoutsQueue(endpoint), now: time.Now, reached: time.Now}, nil
}

// ErrUnconfirmed is returned by Publisher.Publish when delayed messages went to an in-process
// GoChannel that closed before its subscriber confirmed them. They may not have been stored.
// Publishing them again with the same UUIDs once the endpoint runs is safe. A timeout is stored
// once per UUID.
var ErrUnconfirmed = errors.New("timeouts: the in-process Pub/Sub closed before the delayed messages were confirmed stored")

// PublisherDecorator returns a message.PublisherDecorator for Router.AddPublisherDecorators, so
// that messages returned by handlers can be delayed too.
func PublisherDecorator(endpoint string) message.PublisherDecorator {
	return func(pub message.Publisher) (message.Publisher, error) {
		return NewPublisher(pub, endpoint)
	}
}

// Publish publishes messages to topic, routing the delayed ones through the Timeouts queue. A
// message whose delay header cannot be read is an error. Nothing is published then.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	now, reached := p.now(), p.reached()
	var direct, delayed []*message.Message
	for _, msg := range messages {
		due, isDelayed, err := wireparse.Due(msg.Metadata, now)
		if err != nil {
			return fmt.Errorf("message %s for %s: %w", msg.UUID, topic, err)
		}
		if !isDelayed || !due.After(reached) {
			direct = append(direct, withoutRouting(msg))
			continue
		}
		delayed = append(delayed, p.routed(msg, topic, due))
	}
	if len(delayed) > 0 {
		if _, err := wireparse.Destination(map[string]string{wire.HeaderDestination: topic}); err != nil {
			return fmt.Errorf("cannot delay messages for topic %q: %w", topic, err)
		}
		if err := p.next.Publish(p.timeouts, delayed...); err != nil {
			return fmt.Errorf("publishing %d delayed messages for %s to %s: %w", len(delayed), topic, p.timeouts, err)
		}
		// A GoChannel returns without an error when it discards messages as it closes.
		if g, ok := p.next.(*gochannel.GoChannel); ok && g.Publish(closedProbeTopic) != nil {
			return fmt.Errorf("%w: %d messages for %s", ErrUnconfirmed, len(delayed), topic)
		}
	}
	if len(direct) > 0 {
		return p.next.Publish(topic, direct...)
	}
	return nil
}

// Close closes the decorated publisher.
func (p *Publisher) Close() error { return p.next.Close() }

// withoutRouting returns msg itself, or a copy without the timeout manager's routing headers if
// it has any (a message already due that was marked with DeliverAt).
func withoutRouting(msg *message.Message) *message.Message {
	has := false
	for k := range msg.Metadata {
		if wireparse.IsRoutingHeader(k) {
			has = true
			break
		}
	}
	if !has {
		return msg
	}
	out := message.NewMessage(msg.UUID, msg.Payload)
	out.Metadata = make(message.Metadata, len(msg.Metadata))
	for k, v := range msg.Metadata {
		if !wireparse.IsRoutingHeader(k) {
			out.Metadata[k] = v
		}
	}
	out.SetContext(msg.Context())
	return out
}

// routed is a copy of msg addressed to the Timeouts queue.
func (p *Publisher) routed(msg *message.Message, topic string, due time.Time) *message.Message {
	out := message.NewMessage(msg.UUID, msg.Payload)
	out.Metadata = make(message.Metadata, len(msg.Metadata)+2)
	for k, v := range msg.Metadata {
		out.Metadata[k] = v
	}
	out.Metadata.Set(wire.HeaderExpire, wireparse.FormatExpire(due))
	out.Metadata.Set(wire.HeaderDestination, topic)
	injectTrace(msg.Context(), out.Metadata)
	out.SetContext(msg.Context())
	return out
}
