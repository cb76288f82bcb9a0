package rabbitmq

import (
	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
)

// MaxDelay is the longest delay the 28 delay levels can express: 268,435,455 s (about 8.5
// years). Publish refuses a longer one with ErrDelayTooLong.
const MaxDelay = nativedelay.MaxDelay

// QueueType is the kind of queue each delay level uses.
type QueueType = nativedelay.QueueType

const (
	// Quorum queues replicate and, with at-least-once dead-lettering, hand an expired message to
	// the next level with publisher confirms: a message is never lost between levels (RabbitMQ
	// 3.10 or later). The default.
	Quorum = nativedelay.Quorum
	// Classic durable queues dead-letter at most once: a message can be lost between levels if
	// the broker stops at that moment. For brokers older than 3.10.
	Classic = nativedelay.Classic
)

// defaultPrefix starts the names of the delay infrastructure.
const defaultPrefix = nativedelay.DefaultPrefix

var (
	// ErrDelayTooLong is returned for a delay beyond MaxDelay.
	ErrDelayTooLong = nativedelay.ErrDelayTooLong
	// ErrInvalidDestination is returned for a destination that cannot end a routing key or name a
	// binding of the delivery exchange: empty, longer than 199 bytes, not valid UTF-8, with a
	// control character, or with a dot-separated word "*" or "#".
	ErrInvalidDestination = nativedelay.ErrInvalidDestination
	// ErrUnroutable is returned for a message the broker returned because no binding routed it:
	// the delay infrastructure or a destination's binding is missing. The message was not kept.
	ErrUnroutable = nativedelay.ErrUnroutable
	// ErrNotConfirmed is returned for a message the broker refused (a negative publisher
	// confirm) or that it may or may not have taken (the channel closed before it confirmed).
	ErrNotConfirmed = nativedelay.ErrNotConfirmed
	// ErrTopology is wrapped by the errors of Verify, and of Publish when the delivery exchange
	// is missing: the delay infrastructure is missing or wrong.
	ErrTopology = nativedelay.ErrTopology
)
