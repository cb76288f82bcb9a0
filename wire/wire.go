// Package wire is timeoutmill's wire contract: the queue names and message headers that other
// processes, languages and tools rely on.
//
// The contract is stable. A message that reaches the Timeouts queue of an endpoint with a
// HeaderExpire and a HeaderDestination header is delivered to that destination when due, with its
// payload and other headers unchanged; the routing headers (IsRoutingHeader says which) are
// removed on the way, so a delivered message published again is not delayed again. A producer
// in another language, or a Go program not using package timeouts, builds such a message by hand
// with FormatExpire (see its example).
//
// A due time is read from HeaderExpire (RFC 3339, fractional seconds allowed, any offset) and
// rounded up to Precision; without HeaderExpire, Watermill's HeaderWatermillDelayedUntil is
// honoured. Watermill writes that key in whole seconds, truncating the time it was asked for, so
// a value without a fractional part is taken as the later of the value and the time of receipt
// plus HeaderWatermillDelayedFor, capped at the end of that second, or as the end of that second
// without a usable HeaderWatermillDelayedFor: a message is never delivered early. A present but
// unusable header (an unparsable time, a time after the year 9999, which is out of range, an empty
// or too long destination) is ErrInvalidHeader, and the message goes to the error queue.
//
// Endpoint and instance names, which end up in queue names, are not empty, at most 200 bytes,
// printable, without whitespace, and neither start nor end with a dot; others are
// ErrInvalidName.
//
// # Stability
//
// The wire contract is stable: these names, the headers' meanings and the formats of their values,
// for producers and tools in any language as for Go code. While timeoutmill is at v0, an
// incompatible change to it is made only with an entry marked Breaking in CHANGELOG.md that says
// how to migrate; from v1 on, only in a new major version. CI compares the exported API with the
// baseline in api/ and fails on an incompatible change that the CHANGELOG does not name
// (docs/releasing.md). A change to a header's meaning or format that breaks a producer or consumer
// built on the older contract is such a Breaking change, and comes with a rolling-upgrade path
// (docs/wire.md); new headers may be added in any minor version.
package wire

import (
	"errors"
	"time"
)

// Values of HeaderKeyPolicy.
const (
	// KeyPolicyReplace replaces the pending timeout that holds the key: one delivery follows, at
	// the new due time with the new message.
	KeyPolicyReplace = "replace"
	// KeyPolicyKeep keeps the pending timeout that holds the key and drops the new message.
	KeyPolicyKeep = "keep"
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
	// HeaderKey optionally deduplicates: while a pending timeout holds a key, a delayed message
	// with the same key replaces it or is dropped, as HeaderKeyPolicy says. At most 250 bytes.
	HeaderKey = "timeout.key"
	// HeaderKeyPolicy says what a delayed message with HeaderKey does when a pending timeout holds
	// its key: KeyPolicyReplace (the default when absent) or KeyPolicyKeep.
	HeaderKeyPolicy = "timeout.key_policy"
	// HeaderDue is set on every delivered message: the due time it was delivered for (RFC 3339
	// in UTC, fractional seconds), so that a consumer can measure lateness.
	HeaderDue = "timeout.due"

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

// DispatcherQueue is the queue that carries the ids of due timeouts of endpoint, in the format of
// package dispatcherqueue.
func DispatcherQueue(endpoint string) string { return endpoint + dispatcherSuffix }

// DeferredQueue is the deferred queue of one running instance of endpoint. It is never shared.
func DeferredQueue(endpoint, instance string) string { return endpoint + deferredInfix + instance }

// ErrInvalidHeader is returned when a contract header is present but unusable. Messages carrying
// one go to the error queue with the error's text as their failure reason.
var ErrInvalidHeader = errors.New("wire: invalid header")

// MaxDestinationLength bounds HeaderDestination; the SQL stores keep destinations in 250 characters.
const MaxDestinationLength = 250

// Precision is the resolution at which timeoutmill keeps due times. Every store keeps at least
// microseconds, so due times are rounded up to it: a message is never due earlier than asked.
const Precision = time.Microsecond
