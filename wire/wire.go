// Package wire is timeoutmill's wire contract: the queue names and message headers that other
// processes, languages and tools rely on, and the parsing of the delay headers.
//
// The contract is stable. A message that reaches the Timeouts queue of an endpoint with a
// HeaderExpire and a HeaderDestination header is delivered to that destination when due, with its
// payload and other headers unchanged.
package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Header names of the wire contract.
const (
	// HeaderExpire says when a delayed message may be delivered: RFC 3339, fractional seconds
	// allowed, any offset.
	HeaderExpire = "timeout.expire"
	// HeaderDestination names the topic or queue to deliver a delayed message to when due.
	HeaderDestination = "timeout.destination"
	// HeaderOwner optionally groups timeouts (a saga or order id) so that they can be cancelled
	// together.
	HeaderOwner = "timeout.owner"

	// HeaderWatermillDelayedUntil is Watermill's own delay key (components/delay). It is honoured
	// when HeaderExpire is absent.
	HeaderWatermillDelayedUntil = "_watermill_delayed_until"
	// HeaderWatermillDelayedFor is the relative delay Watermill's delay.Message writes beside
	// HeaderWatermillDelayedUntil.
	HeaderWatermillDelayedFor = "_watermill_delayed_for"

	// HeaderFailureReason says, in words, why a message ended on the error queue.
	HeaderFailureReason = "failure.reason"
	// HeaderFailureQueue names the queue a message failed in.
	HeaderFailureQueue = "failure.queue"
	// HeaderFailureHandler names the handler that failed, when there was one.
	HeaderFailureHandler = "failure.handler"
	// HeaderFailureTime is when the message was moved to the error queue (RFC 3339, UTC).
	HeaderFailureTime = "failure.time"
	// HeaderFailureAttempts counts the attempts made before giving up.
	HeaderFailureAttempts = "failure.attempts"
	// HeaderFailureDelayedRetries counts the delayed retries a message had before it was moved to
	// the error queue.
	HeaderFailureDelayedRetries = "failure.delayed_retries"

	// HeaderRetryIgnoreUntil says a message waiting for a delayed retry must not be handled
	// before this time (Shuttle's IgnoreTillDate): RFC 3339 in UTC, fractional seconds allowed.
	// Whoever receives it earlier moves it to its own deferred queue.
	HeaderRetryIgnoreUntil = "retry.ignore_until"
	// HeaderRetryAttempts counts the handler calls made for a message so far, all of them failed
	// (a decimal integer).
	HeaderRetryAttempts = "retry.attempts"
	// HeaderRetryDelayedRetries counts the delayed retries a message has had so far (a decimal
	// integer); it picks the next DurationToIgnoreOnFailure entry.
	HeaderRetryDelayedRetries = "retry.delayed_retries"
	// HeaderRetryDeferredPass marks a message put back on a deferred queue with the pass of the
	// queue's processor that put it there, so the pass knows when it has come full circle. It is
	// removed when the message returns to its work queue.
	HeaderRetryDeferredPass = "retry.deferred_pass"
)

// DefaultErrorQueue is the error queue used when none is configured.
const DefaultErrorQueue = "error"

// Queue name suffixes of an endpoint's satellite queues.
const (
	timeoutsSuffix   = ".Timeouts"
	dispatcherSuffix = ".TimeoutsDispatcher"
	deferredInfix    = ".Deferred."
)

// ErrInvalidName is returned for an endpoint or instance name that cannot name a queue.
var ErrInvalidName = errors.New("wire: invalid name")

// TimeoutsQueue is the queue delayed messages for endpoint arrive on.
func TimeoutsQueue(endpoint string) string { return endpoint + timeoutsSuffix }

// DispatcherQueue is the queue that carries the ids of due timeouts of endpoint, one per message.
func DispatcherQueue(endpoint string) string { return endpoint + dispatcherSuffix }

// DeferredQueue is the deferred queue of one running instance of endpoint. It is never shared.
func DeferredQueue(endpoint, instance string) string { return endpoint + deferredInfix + instance }

// ValidateName checks that an endpoint or instance name can be used in queue names: not empty,
// at most 200 bytes, printable, and without whitespace.
func ValidateName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s must not be empty", ErrInvalidName, kind)
	case len(name) > 200:
		return fmt.Errorf("%w: %s is longer than 200 bytes", ErrInvalidName, kind)
	}
	for _, r := range name {
		if r < 0x21 || r == 0x7f || r == 0xfffd {
			return fmt.Errorf("%w: %s %q contains whitespace or a control character", ErrInvalidName, kind, name)
		}
	}
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
		return fmt.Errorf("%w: %s %q must not start or end with a dot", ErrInvalidName, kind, name)
	}
	return nil
}
