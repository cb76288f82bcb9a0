package timeouts

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// instance is what a manager with Config.Instance does with its name on a store that implements
// persistence.Claimer. It holds the name while it runs. It gives back what an earlier run of the
// name claimed. It lets the name go at the stop.
type instance struct {
	name    string
	claimer persistence.Claimer // nil: no name, or a store that does not record claims' holders
	release func() error        // lets the name go; nil until held
}

// newInstance returns the instance of config. It has no claimer when the name is empty or the
// store cannot record who claimed what.
func newInstance(config Config) *instance {
	in := &instance{name: config.Instance}
	if c, ok := config.Store.(persistence.Claimer); ok && config.Instance != "" {
		in.claimer = c
	}
	return in
}

// claimsAs is the name the poller records on its claims, or "" for none.
func (in *instance) claimsAs() string {
	if in.claimer == nil {
		return ""
	}
	return in.name
}

// startError is why a manager refused to start. errors.Is matches the cause, among them
// persistence.ErrInstanceInUse.
type startError struct {
	endpoint, instance string
	err                error
}

func (e *startError) Error() string {
	return fmt.Sprintf("timeouts: the manager of %s did not start as instance %q: %v", e.endpoint, e.instance, e.err)
}

func (e *startError) Unwrap() error { return e.err }

// holdInstance takes the manager's name. Then it gives back what an earlier run of the name
// claimed and did not announce or deliver (a kill -9 leaves such claims behind). It retries
// under the fetch breaker while the store fails. It reports whether the manager may go on. It
// is false when ctx ended, or when the name is held by another running manager. Then
// m.startErr says so, and nothing was released.
func (m *Manager) holdInstance(ctx context.Context) bool {
	in := m.instance
	if in.name == "" {
		return true
	}
	if in.claimer == nil {
		m.logger.Info("The store does not record which instance claimed what: the instance name does not speed up "+
			"recovery, and ids a crashed run claimed wait for their lease", watermill.LogFields{
			"instance": in.name, "claim_lease": m.cfg.ClaimLease})
		return true
	}
	fields := watermill.LogFields{"instance": in.name}
	for in.release == nil {
		if ctx.Err() != nil {
			return false
		}
		callCtx, end := m.poller.fetch.Call(ctx)
		release, err := in.claimer.HoldInstance(callCtx, in.name)
		end(err)
		switch {
		case err == nil:
			in.release = release
		case errors.Is(err, persistence.ErrInstanceInUse):
			m.refuseStart(&startError{endpoint: m.cfg.Endpoint, instance: in.name, err: err})
			return false
		case ctx.Err() != nil:
			return false
		default:
			m.logger.Error("Taking the instance name failed; retrying", err, fields)
			m.poller.fetch.Failure(ctx, err)
		}
	}
	for ctx.Err() == nil {
		callCtx, end := m.poller.fetch.Call(ctx)
		n, err := in.claimer.ReleaseClaimsOf(callCtx, in.name)
		end(err)
		if err == nil {
			m.poller.fetch.Success()
			fields["released"] = n
			m.logger.Info("Gave back the claims an earlier run of this instance left", fields)
			return true
		}
		if ctx.Err() != nil {
			break
		}
		m.logger.Error("Giving back the claims of an earlier run of this instance failed; retrying", err, fields)
		m.poller.fetch.Failure(ctx, err)
	}
	return false
}

// letInstanceGo lets the manager's name go, once the poller has stopped and what it held was given
// back.
func (m *Manager) letInstanceGo() {
	in := m.instance
	if in.release == nil {
		return
	}
	release := in.release
	in.release = nil
	if err := release(); err != nil {
		m.logger.Error("Letting the instance name go failed; the store frees it when the connection ends", err,
			watermill.LogFields{"instance": in.name})
	}
}

// refuseStart records why the manager did not start, for Err, and logs it.
func (m *Manager) refuseStart(err error) {
	m.mu.Lock()
	if m.startErr == nil {
		m.startErr = err
	}
	m.mu.Unlock()
	m.logger.Error("The manager cannot start; closing the router", err, nil)
}
