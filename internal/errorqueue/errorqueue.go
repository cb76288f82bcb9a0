// Package errorqueue moves messages that cannot be handled to an error queue, with the failure
// headers of the wire contract (wire.HeaderFailureReason and the others) and with their UUID,
// payload and other headers unchanged. The timeout manager's satellites send there what they
// cannot store or dispatch.
package errorqueue

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/wire"
)

// Failure describes why a message is being moved to the error queue.
type Failure struct {
	// Reason says, in words, why the message could not be handled. Required.
	Reason string
	// Queue is the queue the message failed in. Required.
	Queue string
	// Handler names the handler that failed, when there was one.
	Handler string
	// Attempts counts the attempts made, when known (0 = unknown).
	Attempts int
}

// Queue moves messages that cannot be handled to an error queue, with failure headers and
// with their UUID, payload and other headers unchanged.
type Queue struct {
	publisher message.Publisher
	topic     string
	now       func() time.Time
}

// New returns a Queue that publishes to topic ("" = wire.DefaultErrorQueue).
func New(publisher message.Publisher, topic string) *Queue {
	if topic == "" {
		topic = wire.DefaultErrorQueue
	}
	return &Queue{publisher: publisher, topic: topic, now: time.Now}
}

// Topic is the error queue's name.
func (q *Queue) Topic() string { return q.topic }

// Send publishes a copy of msg to the error queue with the failure headers set. The caller acks
// msg only when Send returned nil; otherwise the message must be retried, never dropped.
func (q *Queue) Send(msg *message.Message, f Failure) error {
	out := msg.Copy()
	out.Metadata.Set(wire.HeaderFailureReason, f.Reason)
	out.Metadata.Set(wire.HeaderFailureQueue, f.Queue)
	out.Metadata.Set(wire.HeaderFailureTime, q.now().UTC().Format(time.RFC3339Nano))
	if f.Handler != "" {
		out.Metadata.Set(wire.HeaderFailureHandler, f.Handler)
	}
	if f.Attempts > 0 {
		out.Metadata.Set(wire.HeaderFailureAttempts, strconv.Itoa(f.Attempts))
	}
	out.SetContext(msg.Context())
	if err := q.publisher.Publish(q.topic, out); err != nil {
		return fmt.Errorf("moving message %s from %s to error queue %s: %w", msg.UUID, f.Queue, q.topic, err)
	}
	return nil
}
