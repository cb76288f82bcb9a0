package critical

import (
	"context"
	"sync"
	"time"
)

// DefaultRetryDelay is how long a failing stage waits before it tries again.
const DefaultRetryDelay = time.Second

// BreakerConfig configures a CircuitBreaker.
type BreakerConfig struct {
	// Name identifies the breaker in errors and metrics. Required.
	Name string
	// TimeToWait is how long failures may last before a critical error is raised. Required.
	TimeToWait time.Duration
	// Message is the critical error's text. Required.
	Message string
	// RetryDelay is how long Failure holds its caller back, so a failing stage retries about
	// this often rather than spinning. Defaults to DefaultRetryDelay.
	RetryDelay time.Duration
	// OnTrip receives the critical error. Required.
	OnTrip func(*Error)
	// OnFailure is told of every failure, for metrics. Optional.
	OnFailure func(error)
}

func (c *BreakerConfig) setDefaults() {
	if c.RetryDelay == 0 {
		c.RetryDelay = DefaultRetryDelay
	}
}

// Validate reports the first missing or impossible setting.
func (c BreakerConfig) Validate() error {
	switch {
	case c.Name == "":
		return errorf("breaker Name is required")
	case c.TimeToWait <= 0:
		return errorf("breaker %s: TimeToWait must be positive, got %s", c.Name, c.TimeToWait)
	case c.Message == "":
		return errorf("breaker %s: Message is required", c.Name)
	case c.RetryDelay < 0:
		return errorf("breaker %s: RetryDelay must not be negative, got %s", c.Name, c.RetryDelay)
	case c.OnTrip == nil:
		return errorf("breaker %s: OnTrip is required", c.Name)
	}
	return nil
}

// CircuitBreaker raises a critical error when failures go on, without a success between them, for
// longer than its TimeToWait (NServiceBus's RepeatedFailuresOverTimeCircuitBreaker). The first
// failure arms it and starts a timer; a success disarms it. The timer, not the next failure,
// raises the error, so it comes on time however rarely the stage retries. It trips at most once
// per arming.
type CircuitBreaker struct {
	cfg BreakerConfig

	mu      sync.Mutex
	since   time.Time // zero while disarmed
	lastErr error
	timer   *time.Timer
	tripped bool
	stopped bool   // Stop was called: nothing arms the breaker again
	gen     uint64 // arming generation, so a stale timer cannot trip a re-armed breaker
}

// NewCircuitBreaker returns a disarmed breaker.
func NewCircuitBreaker(cfg BreakerConfig) (*CircuitBreaker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &CircuitBreaker{cfg: cfg}, nil
}

// Failure records a failure and then waits RetryDelay, or until ctx is done, so that the caller
// retries at a steady pace.
func (b *CircuitBreaker) Failure(ctx context.Context, err error) {
	if b.cfg.OnFailure != nil {
		b.cfg.OnFailure(err)
	}
	b.mu.Lock()
	if b.stopped {
		// A stopped stage's failures are its shutdown's doing: they neither arm the breaker nor
		// hold the caller back.
		b.mu.Unlock()
		return
	}
	b.lastErr = err
	if b.since.IsZero() {
		b.since = time.Now()
		b.gen++
		gen := b.gen
		b.timer = time.AfterFunc(b.cfg.TimeToWait, func() { b.trip(gen) })
	}
	b.mu.Unlock()

	t := time.NewTimer(b.cfg.RetryDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Success disarms the breaker.
func (b *CircuitBreaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.since.IsZero() {
		return
	}
	b.timer.Stop()
	b.since, b.lastErr, b.timer, b.tripped = time.Time{}, nil, nil, false
}

// Armed reports whether failures are being counted.
func (b *CircuitBreaker) Armed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.since.IsZero()
}

// Tripped reports whether the breaker raised its critical error and has not been disarmed since.
func (b *CircuitBreaker) Tripped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tripped
}

// Stop cancels a pending trip, for shutdown, and for good: failures recorded after it neither
// arm the breaker nor wait, so a stopped endpoint never raises a critical error.
func (b *CircuitBreaker) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.since, b.lastErr, b.timer = time.Time{}, nil, nil
	b.stopped = true
	b.gen++
}

func (b *CircuitBreaker) trip(gen uint64) {
	b.mu.Lock()
	if gen != b.gen || b.since.IsZero() || b.tripped {
		b.mu.Unlock()
		return
	}
	b.tripped = true
	e := &Error{Breaker: b.cfg.Name, Message: b.cfg.Message, Err: b.lastErr, FailingSince: b.since}
	b.mu.Unlock()
	b.cfg.OnTrip(e)
}
