// Package breaker holds the circuit breakers that raise critical errors (package critical): a
// CircuitBreaker per stage of the timeout manager (fetch, store, dispatch), which trips when the
// stage has gone without a success for longer than its wait, and a RateBreaker for failures that
// come too often. Users do not configure them directly: they set timeouts.Config's waits.
package breaker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/timeoutmill/timeoutmill/critical"
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
	OnTrip func(*critical.Error)
	// OnFailure is told of every failure, for metrics. Optional.
	OnFailure func(error)
	// CallTimeout bounds each call made through Call: past it the call's context is done, so the
	// call returns with an error its caller reports as a failure. Defaults to DefaultCallTimeout,
	// or TimeToWait when that is shorter.
	CallTimeout time.Duration
	// Now reads the wall clock, for when failures and calls began. It must advance as real time
	// does: the breaker's timers run on the time package. Defaults to time.Now.
	Now func() time.Time
}

// DefaultCallTimeout is the longest one call to a store or a broker may take, unless
// BreakerConfig.CallTimeout says otherwise.
const DefaultCallTimeout = 10 * time.Second

func (c *BreakerConfig) setDefaults() {
	if c.RetryDelay == 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = min(DefaultCallTimeout, c.TimeToWait)
	}
	if c.Now == nil {
		c.Now = time.Now
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
	case c.CallTimeout < 0:
		return errorf("breaker %s: CallTimeout must not be negative, got %s", c.Name, c.CallTimeout)
	}
	return nil
}

// CircuitBreaker raises a critical error when its stage has gone without a success for longer
// than its TimeToWait (NServiceBus's RepeatedFailuresOverTimeCircuitBreaker), in either of two
// ways:
//   - failures go on without a success between them: the first failure arms the breaker and
//     starts a timer, a success disarms it;
//   - calls made through Call are in flight and none has succeeded: a call that never returns
//     (a black-holed network, a server that stopped answering) tells no one of its failure, so
//     the breaker watches the time since the last success while there is work.
//
// A timer, not the next failure, raises the error, so it comes on time however rarely the stage
// retries and however long a call hangs. It trips at most once until a success.
type CircuitBreaker struct {
	cfg BreakerConfig

	mu      sync.Mutex
	since   time.Time // zero while disarmed
	lastErr error
	timer   *time.Timer
	tripped bool
	stopped bool          // Stop was called: nothing arms the breaker again
	stop    chan struct{} // closed by Stop: releases the callers Failure holds back
	gen     uint64        // arming generation, so a stale timer cannot trip a re-armed breaker

	// The watch over calls in flight (Call).
	inFlight  int         // calls started and not ended
	busySince time.Time   // when calls were first in flight with no success since; zero when none are
	watch     *time.Timer // fires TimeToWait after busySince; nil until the first call
	watching  bool        // watch is set to fire
	// The oldest call that ended unanswered (with an error) since the last success, and when the
	// last such call ended: a Failure reported right after it counts from when that call began,
	// not from when it gave up.
	unansweredSince, unansweredEnded time.Time
}

// NewCircuitBreaker returns a disarmed breaker.
func NewCircuitBreaker(cfg BreakerConfig) (*CircuitBreaker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &CircuitBreaker{cfg: cfg, stop: make(chan struct{})}, nil
}

// Failure records a failure and then waits RetryDelay, or until ctx is done or the breaker stops,
// so that the caller retries at a steady pace.
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
		now := b.cfg.Now()
		b.since = now
		// A failure reported as the call behind it ended: failing since that call began.
		if !b.unansweredSince.IsZero() && now.Sub(b.unansweredEnded) <= b.cfg.RetryDelay+time.Second {
			b.since = b.unansweredSince
		}
		b.unansweredSince, b.unansweredEnded = time.Time{}, time.Time{}
		b.gen++
		gen := b.gen
		b.timer = time.AfterFunc(max(b.cfg.TimeToWait-now.Sub(b.since), 0), func() { b.trip(gen) })
	}
	b.mu.Unlock()

	t := time.NewTimer(b.cfg.RetryDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-b.stop:
	}
}

// Call starts a call of the stage to a store or a broker: it returns ctx bounded by the
// breaker's CallTimeout, and end, which the caller must call with the call's error when it
// returns (the caller still reports its outcome with Success or Failure as usual). While calls
// are in flight and none has succeeded for TimeToWait, the breaker trips, even if none of them
// ever returns; and a Failure reported as a call ends with an error counts from when that call
// began, so a call that gives up after a while (its deadline, a dead connection found by a
// heartbeat) does not put the critical error off by that while.
func (b *CircuitBreaker) Call(ctx context.Context) (callCtx context.Context, end func(error)) {
	return b.CallWithin(ctx, b.cfg.CallTimeout)
}

// CallWithin is Call with a deadline of its own: timeout instead of CallTimeout. It is for calls
// whose answer may come late without being lost, such as a broker's publish confirms. Their
// caller would otherwise repeat the call, and the broker would get the work twice. The watch over
// calls in flight is the same: no success for TimeToWait trips the breaker.
func (b *CircuitBreaker) CallWithin(ctx context.Context, timeout time.Duration) (callCtx context.Context, end func(error)) {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return callCtx, func(error) { cancel() }
	}
	began := b.cfg.Now()
	b.inFlight++
	if b.inFlight == 1 {
		b.busySince = began
		b.armWatch(b.cfg.TimeToWait)
	}
	b.mu.Unlock()
	var once sync.Once
	return callCtx, func(err error) {
		once.Do(func() {
			cancel()
			b.mu.Lock()
			defer b.mu.Unlock()
			b.inFlight--
			switch {
			case err == nil: // answered: the stage works
				b.unansweredSince, b.unansweredEnded = time.Time{}, time.Time{}
				if b.inFlight > 0 {
					b.busySince = b.cfg.Now()
				}
			case b.unansweredSince.IsZero() || began.Before(b.unansweredSince):
				b.unansweredSince = began
				fallthrough
			default:
				b.unansweredEnded = b.cfg.Now()
			}
			if b.inFlight == 0 {
				b.busySince = time.Time{}
			}
		})
	}
}

// armWatch sets the watch to fire after d, unless it is set already. b.mu is held.
func (b *CircuitBreaker) armWatch(d time.Duration) {
	if b.watching {
		return
	}
	b.watching = true
	if b.watch == nil {
		b.watch = time.AfterFunc(d, b.watchFired)
		return
	}
	b.watch.Reset(d)
}

// watchFired trips the breaker when calls have been in flight for TimeToWait with no success, and
// otherwise sets the watch again for when that would be.
func (b *CircuitBreaker) watchFired() {
	b.mu.Lock()
	b.watching = false
	if b.stopped || b.inFlight == 0 || b.tripped {
		b.mu.Unlock()
		return
	}
	if left := b.cfg.TimeToWait - b.cfg.Now().Sub(b.busySince); left > 0 {
		b.armWatch(left)
		b.mu.Unlock()
		return
	}
	b.tripped = true
	err := b.lastErr
	if err == nil {
		err = fmt.Errorf("%w: %s with calls in flight and no success", critical.ErrNoAnswer, b.cfg.TimeToWait)
	} else {
		err = fmt.Errorf("%w: %s with calls in flight and no success; the last failure: %w", critical.ErrNoAnswer, b.cfg.TimeToWait, err)
	}
	since := b.busySince
	if !b.since.IsZero() && b.since.Before(since) {
		since = b.since
	}
	e := &critical.Error{Breaker: b.cfg.Name, Message: b.cfg.Message, Err: err, FailingSince: since}
	b.mu.Unlock()
	b.cfg.OnTrip(e)
}

// Success disarms the breaker.
func (b *CircuitBreaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight > 0 {
		b.busySince = b.cfg.Now()
	}
	b.unansweredSince, b.unansweredEnded = time.Time{}, time.Time{}
	b.tripped = false
	if b.since.IsZero() {
		return
	}
	b.timer.Stop()
	b.since, b.lastErr, b.timer, b.tripped = time.Time{}, nil, nil, false
}

// Armed reports whether the breaker counts down to a critical error: failures are being counted,
// or calls have been in flight for longer than quietCall with no success.
func (b *CircuitBreaker) Armed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.since.IsZero() || (b.inFlight > 0 && b.cfg.Now().Sub(b.busySince) > quietCall)
}

// quietCall is how long calls may be in flight with no success before Armed says so: longer than
// a healthy call takes, so that a working stage does not flicker.
const quietCall = time.Second

// TimeToWait is how long the stage may go without a success before the breaker trips.
func (b *CircuitBreaker) TimeToWait() time.Duration { return b.cfg.TimeToWait }

// CallTimeout is the deadline Call gives each call.
func (b *CircuitBreaker) CallTimeout() time.Duration { return b.cfg.CallTimeout }

// Tripped reports whether the breaker raised its critical error and has not been disarmed since.
func (b *CircuitBreaker) Tripped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tripped
}

// Stop cancels a pending trip, for shutdown, and for good: failures recorded after it neither
// arm the breaker nor wait, so a stopped endpoint never raises a critical error. Callers that
// Failure holds back go at once: a failing stage does not hold up the shutdown.
func (b *CircuitBreaker) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped {
		close(b.stop)
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	b.since, b.lastErr, b.timer = time.Time{}, nil, nil
	if b.watch != nil {
		b.watch.Stop()
	}
	b.watching = false
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
	e := &critical.Error{Breaker: b.cfg.Name, Message: b.cfg.Message, Err: b.lastErr, FailingSince: b.since}
	b.mu.Unlock()
	b.cfg.OnTrip(e)
}
