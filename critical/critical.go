// Package critical is what a user of timeoutmill sees of its critical errors: failures of its own
// machinery (its store, its broker) that lasted longer than they may, after which the endpoint
// cannot do its job and should stop. A Manager raises them as *Error (timeouts.CriticalError) to
// timeouts.Config.OnCriticalError and Manager.Err; find one with errors.As, and its cause with
// errors.Is (ErrNoAnswer for calls that never returned).
//
//	var critErr *critical.Error
//	if errors.As(manager.Err(), &critErr) && critErr.Message == critical.FetchMessage { ... }
//
// It knows nothing of Watermill routers; the circuit breakers that raise these errors are
// configured through timeouts.Config's waits (TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages
// and the others), and the default action, in package timeouts, logs the error and closes the
// router. The messages are NServiceBus's wording and are kept as they are: match on them.
//
// # Stability
//
// This package's API is stable, as timeouts' is: while timeoutmill is at v0, an incompatible
// change to it is made only with an entry marked Breaking in CHANGELOG.md that says how to
// migrate; from v1 on, only in a new major version (docs/releasing.md).
package critical

import (
	"errors"
	"fmt"
	"time"
)

// Messages of the critical errors raised by the timeout manager's stages.
const (
	// FetchMessage is NServiceBus's text for a store that could not be polled for due timeouts.
	FetchMessage = "Repeated failures when fetching timeouts from storage, endpoint will be terminated."
	// StoreMessage is raised when delayed messages could not be stored.
	StoreMessage = "Repeated failures when storing delayed messages, endpoint will be terminated."
	// DispatchMessage is raised when due messages could not be dispatched.
	DispatchMessage = "Repeated failures when dispatching delayed messages, endpoint will be terminated."
	// RecoveryMessage is raised when failed forwarding attempts could not even be recorded.
	RecoveryMessage = "Failed to execute error handling for delayed message forwarding"
)

// Error is a critical error. Callers find one with errors.As.
type Error struct {
	// Breaker names the circuit breaker that raised it ("fetch", "store", "dispatch", ...).
	Breaker string
	// Message says, in words, what failed and what follows.
	Message string
	// Err is the last failure seen before the breaker tripped.
	Err error
	// FailingSince is when the failures began.
	FailingSince time.Time
}

func (e *Error) Error() string {
	return fmt.Sprintf("critical error (%s breaker, failing since %s): %s: %v",
		e.Breaker, e.FailingSince.UTC().Format(time.RFC3339), e.Message, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrNoAnswer is the error of a critical error raised because calls to a store or a broker went
// on for the whole wait with no success: none returned, or those that did failed. Find it with
// errors.Is.
var ErrNoAnswer = errors.New("no answer")
