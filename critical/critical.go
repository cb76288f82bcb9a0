// Package critical raises critical errors: failures of timeoutmill's own machinery (its store,
// its dispatcher) that lasted longer than they may, after which the endpoint cannot do its job and
// should stop. A CircuitBreaker watches one stage; an Action decides what happens when it trips.
//
// It knows nothing of Watermill routers; package timeouts supplies the default action, which logs
// the error and closes the router.
package critical

import (
	"context"
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

// Action is what is done about a critical error. It is called once per tripped breaker, on a
// goroutine of its own, so it may block (for example while it closes a router).
type Action func(ctx context.Context, err *Error)
