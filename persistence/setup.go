package persistence

import (
	"context"
	"errors"
)

// ErrNotSetUp is returned when a store's table (or, for SQLite, its database file) does not exist:
// SetupInfrastructure never ran for it, or the store names another endpoint or table than the one
// that was set up. Callers test it with errors.Is; the error's text names what is missing.
var ErrNotSetUp = errors.New("persistence: not set up")

// SetupChecker is an optional interface that may be implemented by an [Installer]: it tells whether
// the store's table exists, creating nothing.
//
// Tools that only look at or cancel timeouts (timeoutmill stats, list and cancel) check first, so
// that a mistyped endpoint is reported as missing rather than answered from an empty table made
// for the occasion. If a store does not implement SetupChecker, such a tool finds out from its
// first query. Every SQL backend of this module implements it.
type SetupChecker interface {
	// CheckInfrastructure returns nil when the store's table exists, an error wrapping ErrNotSetUp
	// that names the table when it does not, and another error when it cannot tell (the server
	// is unreachable, say).
	CheckInfrastructure(ctx context.Context) error
}
