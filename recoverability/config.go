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

// DefaultMaxDeferredHold is the default of Config.MaxDeferredHold.
const DefaultMaxDeferredHold = 5 * time.Minute

// Config configures the retries of one handler: immediate retries, delayed retries through a
// deferred queue, and the error queue.
type Config struct {
	// WorkQueue is the topic the handler consumes; delayed retries are sent back to it. Required.
	WorkQueue string

	// Endpoint and Instance name this running instance's deferred queue,
	// wire.DeferredQueue(Endpoint, Instance) = "<Endpoint>.Deferred.<Instance>". A deferred queue
	// belongs to one instance and is never shared: give every instance its own Instance (a host
	// name, a pod name), and every handler with retries its own Endpoint. Both are required
	// unless WithoutDeferredQueue is set.
	Endpoint string
	Instance string
	// WithoutDeferredQueue runs without a deferred queue, as Shuttle does when none is
	// configured: a message waiting for its delayed retry is put straight back on the work queue,
	// again and again, until it is due. That keeps the work queue busy with messages that cannot
	// be handled yet ("queue thrashing"); use it only for the simplest programs and tests.
	WithoutDeferredQueue bool

	// ErrorQueue receives messages that are out of retries. Defaults to "error".
	ErrorQueue string
	// ImmediateRetries is how many times a failed handler is called again at once, on the
	// message's first delivery, before delayed retries begin. Defaults to 0.
	ImmediateRetries int
	// DurationToIgnoreOnFailure is the delayed-retry schedule: after the n-th failed delivery the
	// message is ignored for DurationToIgnoreOnFailure[n-1] and then handled once more; when the
	// list is used up the message goes to the error queue. A handler that always fails is thus
	// called 1 + ImmediateRetries + len(DurationToIgnoreOnFailure) times. Defaults to 10 s, 30 s,
	// 1 min when nil; an empty, non-nil list means no delayed retries.
	DurationToIgnoreOnFailure []time.Duration

	// Publisher sends retries to the work queue, waiting messages to the deferred queue and
	// failed ones to the error queue. Required.
	Publisher message.Publisher
	// Subscriber consumes the deferred queue. Required unless WithoutDeferredQueue is set.
	Subscriber message.Subscriber
	// MaxDeferredHold is the longest the deferred queue's processor holds one message unacked
	// while it waits for the queue's next processing time; after that it makes a pass anyway.
	// Brokers cap how long a delivery may stay unacked (RabbitMQ's consumer_timeout is 30
	// minutes). Defaults to 5 minutes.
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
		c.MaxDeferredHold = DefaultMaxDeferredHold
	}
}

// DeferredQueue is the name of the instance's deferred queue, or "" without one.
func (c Config) DeferredQueue() string {
	if c.WithoutDeferredQueue {
		return ""
	}
	return wire.DeferredQueue(c.Endpoint, c.Instance)
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
	}
	for i, d := range c.DurationToIgnoreOnFailure {
		if d < 0 {
			return invalid("DurationToIgnoreOnFailure[%d] must not be negative, got %s", i, d)
		}
	}
	if c.WithoutDeferredQueue {
		if c.Instance != "" {
			return invalid("WithoutDeferredQueue is set, yet Instance %q names a deferred queue: choose one", c.Instance)
		}
		return nil
	}
	const hint = " (a deferred queue belongs to one running instance; set WithoutDeferredQueue to run without one)"
	if err := wireparse.ValidateName("Endpoint", c.Endpoint); err != nil {
		return fmt.Errorf("%w: %w"+hint, ErrInvalidConfig, err)
	}
	if err := wireparse.ValidateName("Instance", c.Instance); err != nil {
		return fmt.Errorf("%w: %w"+hint, ErrInvalidConfig, err)
	}
	if q := c.DeferredQueue(); q == c.WorkQueue || q == c.ErrorQueue {
		return invalid("the deferred queue %q must differ from the work and error queues", q)
	}
	if c.Subscriber == nil {
		return invalid("Subscriber is required to consume the deferred queue %q", c.DeferredQueue())
	}
	return nil
}
