package timeouts

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Health reports whether the manager is ready to do its work. It returns nil once its router
// runs both satellites (subscribed) and the store is set up. The Config.Instance name must be
// held too (on a store that records claims' holders). No stage's circuit breaker may be armed,
// and nothing may have stopped it. Otherwise it returns one error per reason it is not, joined
// (errors.Join: the error's Unwrap() []error lists them). Each is a line such as
//
//	not added to a router
//	satellites not subscribed
//	store not set up
//	instance name not held
//	breaker fetch armed; last failure 2s ago: dial tcp 127.0.0.1:5432: connect: connection refused
//	stopping
//	stopped
//	stopped: <the error Err returns>
//	critical error: <the error Err returns> (with Config.OnCriticalError, which decides what stops)
//
// errors.Is sees through it to the cause of Err: persistence.ErrInstanceInUse for a twin.
//
// A breaker is armed from a stage's first failure until its next success. It is armed too
// while calls to the store or the broker have gone unanswered for over a second. So an outage
// shows once the manager calls what is down. The poller looks at the store at least every
// PollInterval. The broker is called when a timeout is due, to announce and forward it. This
// is long before the breaker's wait ends in a critical error. Health reads the manager's state
// in memory, never the store or the broker. So it is cheap enough for a probe polled every few
// seconds. It is safe to call from any goroutine.
func (m *Manager) Health() error {
	var reasons []error
	m.mu.Lock()
	router, startErr, critErr := m.router, m.startErr, m.critErr
	m.mu.Unlock()

	switch {
	case startErr != nil:
		reasons = append(reasons, fmt.Errorf("stopped: %w", startErr))
	case critErr != nil && m.cfg.OnCriticalError != nil:
		reasons = append(reasons, fmt.Errorf("critical error: %w", critErr))
	case critErr != nil:
		reasons = append(reasons, fmt.Errorf("stopped: %w", critErr))
	case closed(m.done):
		reasons = append(reasons, errors.New("stopped"))
	case m.stop.stopping():
		reasons = append(reasons, errors.New("stopping"))
	}
	switch {
	case router == nil:
		reasons = append(reasons, errors.New("not added to a router"))
	case !closed(router.Running()):
		reasons = append(reasons, errors.New("satellites not subscribed"))
	}
	if !closed(m.ready) {
		if m.setUp.Load() {
			reasons = append(reasons, errors.New("instance name not held"))
		} else {
			reasons = append(reasons, errors.New("store not set up"))
		}
	}
	for i, b := range m.breakers {
		if b.Armed() {
			reasons = append(reasons, m.failures.armed(m.breakerNames[i], m.cfg.Clock.Now()))
		}
	}
	return errors.Join(reasons...)
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// lastFailures keeps each breaker's last failure, for Health. The breaker itself only says
// whether it is armed.
type lastFailures struct {
	mu   sync.Mutex
	errs map[string]lastFailure
}

type lastFailure struct {
	err error
	at  time.Time
}

// note records err as breaker's last failure, which happened at.
func (f *lastFailures) note(breaker string, err error, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.errs == nil {
		f.errs = map[string]lastFailure{}
	}
	f.errs[breaker] = lastFailure{err: err, at: at}
}

// armed is Health's reason for an armed breaker at now. That is its last failure and how long
// ago it was. When none failed yet, it says that its calls go unanswered.
func (f *lastFailures) armed(breaker string, now time.Time) error {
	f.mu.Lock()
	last, ok := f.errs[breaker]
	f.mu.Unlock()
	if !ok || last.err == nil {
		return fmt.Errorf("breaker %s armed: its calls go unanswered", breaker)
	}
	ago := now.Sub(last.at).Round(time.Second)
	return fmt.Errorf("breaker %s armed; last failure %s ago: %w", breaker, ago, last.err)
}
