// Package recoverability decides what happens to a message that could not be handled: retried,
// deferred, or moved to the error queue with failure headers (wire.HeaderFailureReason and
// friends) — never dropped, never retried forever.
package recoverability
