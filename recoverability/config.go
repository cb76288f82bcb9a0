package recoverability

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ErrInvalidConfig is wrapped by every configuration error of this package, from code and from
// configuration files alike.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// DefaultDurationToIgnoreOnFailure returns Shuttle's default delayed-retry schedule: 10 s, 30 s,
// 1 min. (A function, so that no caller can change the default for everyone.)
func DefaultDurationToIgnoreOnFailure() []time.Duration {
	return []time.Duration{10 * time.Second, 30 * time.Second, time.Minute}
}

// defaultMaxDeferredHold is the default of Config.MaxDeferredHold.
const defaultMaxDeferredHold = 5 * time.Minute

// Config configures the retries of one handler: immediate retries, delayed retries through a
// deferred queue, and the error queue.
type Config struct {
	// WorkQueue is the topic the handler consumes; delayed retries are sent back to it. Required:
	// New refuses an empty one.
	WorkQueue string

	// DeferredQueue is this running instance's deferred queue, where messages wait for their
	// delayed retry; any name will do (wire.DeferredQueue(endpoint, instance) gives the
	// conventional "<endpoint>.Deferred.<instance>"). A deferred queue belongs to one instance
	// and is never shared: give every running instance, and every handler with retries, its own.
	// The AMQP and SQL transports refuse a second consumer of it at start (see the package
	// documentation). Defaults to none: as in Shuttle, a message waiting for its delayed retry
	// is then put straight back on the work queue, again and again, until it is due; that keeps
	// the work queue busy with messages that cannot be handled yet ("queue thrashing"), so New
	// logs a warning, and it suits only the simplest programs and tests; leave Subscriber nil
	// then too. New refuses a name that cannot name a queue (more than 200 bytes, white space or
	// a control character, a leading or trailing dot), one equal to WorkQueue or ErrorQueue, and
	// an empty DeferredQueue with a Subscriber set: that is what a Config written for the former
	// Endpoint and Instance fields, which named the deferred queue
	// wire.DeferredQueue(Endpoint, Instance), becomes once they are deleted, and running it
	// without a deferred queue would change its behaviour silently.
	DeferredQueue string

	// ErrorQueue receives messages that are out of retries. Defaults to "error". New refuses a
	// name that cannot name a queue, and one equal to WorkQueue.
	ErrorQueue string
	// ImmediateRetries is how many times a failed handler is called again at once, on the
	// message's first delivery, before delayed retries begin. Defaults to 0; New refuses a
	// negative count.
	ImmediateRetries int
	// DurationToIgnoreOnFailure is the delayed-retry schedule. Defaults to 10 s, 30 s, 1 min when
	// nil; an empty, non-nil list means no delayed retries (with MaximumFailureCount: retries
	// without a wait). Without MaximumFailureCount, after the n-th failed delivery the message is
	// ignored for DurationToIgnoreOnFailure[n-1] and then handled once more, and when the list is
	// used up it goes to the error queue: a handler that always fails is called
	// 1 + ImmediateRetries + len(DurationToIgnoreOnFailure) times. New refuses a negative entry.
	DurationToIgnoreOnFailure []time.Duration
	// MaximumFailureCount, when above 0, decides as in Shuttle when a message goes to the error
	// queue: a message is retried while its failures number fewer than MaximumFailureCount, and
	// the n-th failure waits DurationToIgnoreOnFailure[n-1], or the list's last entry when it is
	// shorter. A failure is a delivery whose handler calls all failed (on the first delivery,
	// its ImmediateRetries included), so a handler that always fails is called
	// ImmediateRetries + MaximumFailureCount times. Defaults to 0: not given, the length of the
	// schedule decides, as above (which is MaximumFailureCount len(DurationToIgnoreOnFailure)+1).
	// New refuses a negative count.
	MaximumFailureCount int

	// Publisher sends retries to the work queue, waiting messages to the deferred queue and
	// failed ones to the error queue. Required: New refuses nil.
	Publisher message.Publisher
	// Subscriber consumes the deferred queue. Required with a DeferredQueue, and nil without one:
	// New refuses a DeferredQueue without a Subscriber, and a Subscriber without a DeferredQueue
	// (see DeferredQueue).
	Subscriber message.Subscriber
	// MaxDeferredHold is the longest the deferred queue's processor holds one message unacked
	// while it waits for the queue's next processing time; after that it makes a pass anyway.
	// Brokers cap how long a delivery may stay unacked (RabbitMQ's consumer_timeout is 30
	// minutes). Defaults to 5 minutes; New refuses a negative hold.
	MaxDeferredHold time.Duration
}

func (c *Config) setDefaults() {
	if c.ErrorQueue == "" {
		c.ErrorQueue = wire.DefaultErrorQueue
	}
	if c.DurationToIgnoreOnFailure == nil {
		c.DurationToIgnoreOnFailure = DefaultDurationToIgnoreOnFailure()
	}
	if c.MaxDeferredHold == 0 {
		c.MaxDeferredHold = defaultMaxDeferredHold
	}
}

// Validate reports the first missing or impossible setting.
func (c Config) Validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.WorkQueue == "" {
		return invalid("WorkQueue is required: the topic the handler consumes")
	}
	if c.ErrorQueue != "" {
		if err := wireparse.ValidateName("ErrorQueue", c.ErrorQueue); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if c.ErrorQueue == c.WorkQueue {
			return invalid("ErrorQueue and WorkQueue are both %q", c.WorkQueue)
		}
	}
	switch {
	case c.ImmediateRetries < 0:
		return invalid("ImmediateRetries must not be negative, got %d", c.ImmediateRetries)
	case c.Publisher == nil:
		return invalid("Publisher is required")
	case c.MaxDeferredHold < 0:
		return invalid("MaxDeferredHold must not be negative, got %s", c.MaxDeferredHold)
	case c.MaximumFailureCount < 0:
		return invalid("MaximumFailureCount must not be negative, got %d", c.MaximumFailureCount)
	}
	for i, d := range c.DurationToIgnoreOnFailure {
		if d < 0 {
			return invalid("DurationToIgnoreOnFailure[%d] must not be negative, got %s", i, d)
		}
	}
	if c.DeferredQueue == "" {
		if c.Subscriber != nil {
			return invalid("DeferredQueue is required with a Subscriber: set DeferredQueue to this instance's deferred queue " +
				"(wire.DeferredQueue(endpoint, instance) is the one the former Endpoint and Instance fields named), " +
				"or leave Subscriber nil to run without one, putting messages that wait for a delayed retry back on the work queue")
		}
		return nil
	}
	if err := wireparse.ValidateName("DeferredQueue", c.DeferredQueue); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if q := c.DeferredQueue; q == c.WorkQueue || q == c.ErrorQueue {
		return invalid("the deferred queue %q must differ from the work and error queues", q)
	}
	if c.Subscriber == nil {
		return invalid("Subscriber is required to consume the deferred queue %q", c.DeferredQueue)
	}
	return nil
}

// maxFailures is how many failed deliveries send a message to the error queue.
func (c Config) maxFailures() int {
	if c.MaximumFailureCount > 0 {
		return c.MaximumFailureCount
	}
	return len(c.DurationToIgnoreOnFailure) + 1
}

// ignoreFor is how long a message is ignored after its n-th failed delivery (n from 1): the n-th
// entry of the schedule, or its last one when it is shorter, or no time without one.
func (c Config) ignoreFor(n int) time.Duration {
	s := c.DurationToIgnoreOnFailure
	switch {
	case len(s) == 0:
		return 0
	case n > len(s):
		return s[len(s)-1]
	default:
		return s[n-1]
	}
}
