package breaker

import (
	"sync"
	"time"

	"github.com/timeoutmill/timeoutmill/critical"
)

// DefaultRateWindow is the window over which a RateBreaker counts failures.
const DefaultRateWindow = 30 * time.Second

// RateBreakerConfig configures a RateBreaker.
type RateBreakerConfig struct {
	// Name identifies the breaker in errors and metrics. Required.
	Name string
	// MaxFailuresPerSecond is the failure rate a RateBreaker tolerates, averaged over Window.
	// Required.
	MaxFailuresPerSecond int
	// Window is how long failures are counted before the count starts again. Defaults to
	// DefaultRateWindow.
	Window time.Duration
	// Message is the critical error's text. Required.
	Message string
	// OnTrip receives the critical error. Required.
	OnTrip func(*critical.Error)
	// OnFailure is told of every failure, for metrics. Optional.
	OnFailure func(error)
	// Now reads the wall clock, for when a window opens. Defaults to time.Now.
	Now func() time.Time
}

func (c *RateBreakerConfig) setDefaults() {
	if c.Window == 0 {
		c.Window = DefaultRateWindow
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first missing or impossible setting.
func (c RateBreakerConfig) Validate() error {
	switch {
	case c.Name == "":
		return errorf("rate breaker Name is required")
	case c.MaxFailuresPerSecond <= 0:
		return errorf("rate breaker %s: MaxFailuresPerSecond must be positive, got %d", c.Name, c.MaxFailuresPerSecond)
	case c.Window < time.Second:
		return errorf("rate breaker %s: Window must be at least a second, got %s", c.Name, c.Window)
	case c.Message == "":
		return errorf("rate breaker %s: Message is required", c.Name)
	case c.OnTrip == nil:
		return errorf("rate breaker %s: OnTrip is required", c.Name)
	}
	return nil
}

// RateBreaker raises a critical error when failures come faster than MaxFailuresPerSecond over
// a window (NServiceBus's FailureRateCircuitBreaker, which the MSMQ timeout manager uses for
// MaximumRecoveryFailuresPerSecond). The first failure opens a window; more than
// MaxFailuresPerSecond × Window failures inside it raise the error, once per window. Unlike a
// CircuitBreaker it never holds its caller back and needs no success to reset: a window that
// ends resets the count.
type RateBreaker struct {
	cfg   RateBreakerConfig
	limit int

	mu      sync.Mutex
	opened  time.Time // start of the current window; zero when none is open
	count   int
	tripped bool
	stopped bool
}

// NewRateBreaker returns a RateBreaker with no failures counted.
func NewRateBreaker(cfg RateBreakerConfig) (*RateBreaker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &RateBreaker{cfg: cfg, limit: cfg.MaxFailuresPerSecond * int(cfg.Window/time.Second)}, nil
}

// Failure counts one failure and raises the critical error when the window has seen too many.
func (b *RateBreaker) Failure(err error) {
	if b.cfg.OnFailure != nil {
		b.cfg.OnFailure(err)
	}
	now := b.cfg.Now()
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	if b.opened.IsZero() || now.Sub(b.opened) >= b.cfg.Window {
		b.opened, b.count, b.tripped = now, 0, false
	}
	b.count++
	trip := b.count > b.limit && !b.tripped
	if trip {
		b.tripped = true
	}
	since := b.opened
	b.mu.Unlock()
	if trip {
		b.cfg.OnTrip(&critical.Error{Breaker: b.cfg.Name, Message: b.cfg.Message, Err: err, FailingSince: since})
	}
}

// Stop makes the breaker ignore later failures, for shutdown: a stopped endpoint raises no
// critical error.
func (b *RateBreaker) Stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
}
