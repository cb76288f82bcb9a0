// Package persistence is the seam between timeoutmill and the storage of delayed messages: the
// Store interface (the NServiceBus IDelayedMessageStore, in Go), the Timeout it keeps, and the
// errors backends return. Backends live in sub-packages (memory, sqlite, ...) and all pass the one
// conformance suite in persistence/storetest.
//
// Users pick a backend and hand it to timeouts.Config; only backend authors need more of this
// package than that.
//
// # Stability
//
// This package's API is stable for both of its sides, the callers and the store authors: the Store
// interface, its optional interfaces, Timeout, Stats and the errors. While timeoutmill is at v0, an
// incompatible change to it is made only with an entry marked Breaking in CHANGELOG.md that says
// how to migrate; from v1 on, only in a new major version. CI compares the exported API with the
// baseline in api/ and fails on an incompatible change that the CHANGELOG does not name
// (docs/releasing.md). A method added to an existing interface breaks stores written outside this
// module, so a new capability comes as a new optional interface, which callers test for, and a
// store without it keeps compiling and working. The conformance suite, persistence/storetest, may
// gain subtests in any minor version (noted under Changed): a store that passed it may fail a new
// one.
package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Timeout is a delayed message kept until it is due.
type Timeout struct {
	// ID identifies the timeout: the UUID of the message that scheduled it. Stores keep it as a
	// string of at most MaxIDLength bytes.
	ID string
	// Destination is the topic or queue the message is delivered to when due.
	Destination string
	// Due is when the message may be delivered. Stores keep at least microsecond precision.
	Due time.Time
	// Owner optionally groups timeouts (a saga or order id) for CancelByOwner. Empty for none.
	Owner string
	// Payload and Metadata are the message's body and headers, kept byte for byte.
	Payload  []byte
	Metadata map[string]string
	// FailureCount counts failed attempts to forward the message to its destination.
	FailureCount int
	// Key optionally deduplicates: while a pending timeout holds a key, a Scheduler.Schedule of
	// another timeout with that key replaces it or is dropped, as the caller's KeyPolicy says.
	// Empty for none; at most MaxIDLength bytes. Only Schedule takes timeouts with a key: Store
	// and StoreMany refuse them with ErrInvalidTimeout, since they would not resolve the key.
	Key string
	// Parked is why the timeout was set aside (see Parker); empty when it is not parked. Stores
	// set it on what they return; Store, StoreMany and Schedule refuse a timeout with it set.
	Parked string
}

// The range of due times every store keeps (MySQL's DATETIME and SQL Server's datetime2 are the
// narrowest). Callers bring earlier times up to MinDue: a time that long past means "due now".
var (
	MinDue = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxDue = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// MaxIDLength bounds Timeout.ID (the SQL Server store's Id is nvarchar(250)).
const MaxIDLength = 250

// Errors backends return; callers test them with errors.Is.
var (
	// ErrNotFound: no timeout with that id is stored (it was dispatched, removed or cancelled).
	ErrNotFound = errors.New("persistence: timeout not found")
	// ErrInvalidTimeout: the timeout cannot be stored (empty id or destination, id too long).
	ErrInvalidTimeout = errors.New("persistence: invalid timeout")
	// ErrUnsupported: the backend cannot do what was asked (for example a transaction mode).
	ErrUnsupported = errors.New("persistence: unsupported")
)

// Store keeps delayed messages until they are due. Implementations are safe for concurrent use by
// many goroutines and, for shared backends, by many processes: a due timeout is handed to one
// claimer at a time.
type Store interface {
	// Store keeps t. It is idempotent by t.ID: when a timeout with that id is already stored it
	// changes nothing and returns inserted == false, so a redelivered message never makes a
	// second timeout.
	Store(ctx context.Context, t Timeout) (inserted bool, err error)

	// Next returns the earliest time at which ClaimDue could return an id: the due time of the
	// earliest unclaimed timeout, or the end of a claim's lease. ok is false when nothing is stored.
	Next(ctx context.Context) (next time.Time, ok bool, err error)

	// ClaimDue returns up to limit ids of timeouts due at now (Due <= now) that are not claimed,
	// or whose claim's lease ran out, and claims them until now+lease. It takes them in the order
	// they became claimable (so a backlog drains earliest due first). Concurrent callers never
	// get the same id while its lease runs. limit <= 0 claims nothing.
	ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error)

	// Peek returns the timeout with that id, claimed or not, or ErrNotFound.
	Peek(ctx context.Context, id string) (Timeout, error)

	// Remove deletes the timeout once it was forwarded. It returns false when there was nothing
	// to remove: the timeout is gone already (a possible duplicate dispatch).
	Remove(ctx context.Context, id string) (bool, error)

	// IncrementFailureCount records a failed forwarding attempt. It returns false when the
	// timeout is gone already.
	IncrementFailureCount(ctx context.Context, id string) (bool, error)

	// Cancel deletes a pending timeout so it is never delivered. It returns false when there was
	// nothing to cancel. A timeout already claimed may be in the middle of being forwarded;
	// cancelling it then cannot call the message back (the dispatcher's Remove finds it gone).
	Cancel(ctx context.Context, id string) (bool, error)

	// CancelByOwner deletes every pending timeout of owner and returns how many it deleted. An
	// empty owner matches nothing.
	CancelByOwner(ctx context.Context, owner string) (int, error)

	// Close releases the store's resources. Stores opened on a caller's *sql.DB leave it open.
	Close() error
}

// BatchStore is an optional interface that may be implemented by a [Store]: it stores, looks up
// and removes many timeouts in one round trip each.
//
// With one, the timeout manager handles the messages it is handling at the same moment together:
// it stores delayed messages with one StoreMany, and dispatches due timeouts with one PeekMany,
// one publish per destination and one RemoveMany. If a Store does not implement BatchStore, the
// manager falls back to Store, Peek and Remove, once per timeout. Every backend of this module
// implements it.
type BatchStore interface {
	// StoreMany keeps the timeouts (distinct ids), each as Store would, and returns the ids it
	// inserted; the others were stored already. When it fails, for any reason (one invalid
	// timeout among them, say), the manager stores each alone, in a batch of one.
	StoreMany(ctx context.Context, ts []Timeout) ([]string, error)
	// PeekMany returns the stored timeouts among ids, claimed or not, in any order; ids not
	// stored are left out. When it fails, for any reason (ErrCorruptMetadata for one unreadable
	// timeout among them, say), the manager looks up each id alone, in a batch of one.
	PeekMany(ctx context.Context, ids []string) ([]Timeout, error)
	// RemoveMany deletes the timeouts with those ids and returns the ids it deleted; the others
	// were gone already.
	RemoveMany(ctx context.Context, ids []string) ([]string, error)
}

// Releaser is an optional interface that may be implemented by a [Store]: it gives claimed
// timeouts back before their lease runs out.
//
// A timeout manager that stops with timeouts claimed and not delivered (their announcements or
// forwards were cut short by the stop) releases them, so that the next poller claims them at
// once. If a Store does not implement Releaser, they wait for their claim's lease to run out
// (timeouts.Config.ClaimLease) and are delivered then: late, never lost.
type Releaser interface {
	// Release makes the timeouts with these ids claimable again from their due time, and
	// returns how many of them it found. Ids not stored are ignored.
	Release(ctx context.Context, ids []string) (int, error)
}

// Installer is implemented by stores that create their own tables. SetupInfrastructure is
// idempotent and is called before the store is used (NServiceBus's
// IDelayedMessageStoreWithInfrastructure).
type Installer interface {
	SetupInfrastructure(ctx context.Context) error
}

// errKeyed is the reason Store and StoreMany give for refusing a timeout with a Key.
var errKeyed = fmt.Errorf("%w: a timeout with a key is kept by Scheduler.Schedule, not Store", ErrInvalidTimeout)

// ValidateUnkeyed checks t as Validate does, and that it has no Key: what Store and StoreMany
// require.
func (t Timeout) ValidateUnkeyed() error {
	if t.Key != "" {
		return errKeyed
	}
	return t.Validate()
}

// Validate checks what every store requires of a timeout before it is kept.
func (t Timeout) Validate() error {
	switch {
	case t.ID == "":
		return fmt.Errorf("%w: id is empty", ErrInvalidTimeout)
	case len(t.ID) > MaxIDLength:
		return fmt.Errorf("%w: id is longer than %d bytes", ErrInvalidTimeout, MaxIDLength)
	case len(t.Key) > MaxIDLength:
		return fmt.Errorf("%w: key is longer than %d bytes", ErrInvalidTimeout, MaxIDLength)
	case t.Destination == "":
		return fmt.Errorf("%w: destination is empty", ErrInvalidTimeout)
	case t.Due.IsZero():
		return fmt.Errorf("%w: due time is zero", ErrInvalidTimeout)
	case t.Parked != "":
		return fmt.Errorf("%w: a timeout is parked by Parker.Park, not stored parked", ErrInvalidTimeout)
	}
	return ValidateDue(t.Due)
}

// ValidateDue checks that due is in the range every store keeps, MinDue..MaxDue.
func ValidateDue(due time.Time) error {
	if due.Before(MinDue) || due.After(MaxDue) {
		return fmt.Errorf("%w: due time %s is out of range %s..%s", ErrInvalidTimeout,
			due.UTC().Format(time.RFC3339), MinDue.Format(time.RFC3339), MaxDue.Format(time.RFC3339))
	}
	return nil
}

// Stats summarises what a store holds, for operators.
type Stats struct {
	// Pending counts the stored timeouts, claimed, parked or neither.
	Pending int
	// DueNow counts those due at the now Stats was given (overdue ones included), parked ones
	// left out.
	DueNow int
	// Claimed counts those a poller holds at now: they are being delivered. Parked ones are
	// left out.
	Claimed int
	// Parked counts those set aside by Parker.Park: they wait for an operator.
	Parked int
	// Earliest is the due time of the earliest stored timeout (the oldest overdue one, when
	// DueNow is not 0); zero when Pending is 0.
	Earliest time.Time
	// Latest is the due time of the latest stored timeout; zero when Pending is 0.
	Latest time.Time
	// ByDestination counts the stored timeouts of each destination.
	ByDestination map[string]int
}

// ListOptions selects a page of timeouts for Inspector.List. Every filter set must match.
type ListOptions struct {
	// Limit is the largest number of timeouts returned. Defaults to 100.
	Limit int
	// Owner, Destination and Key, when set, list only the timeouts with that owner, destination
	// or deduplication key.
	Owner, Destination, Key string
	// DueFrom and DueBefore, when not zero, list only timeouts due at or after DueFrom and
	// before DueBefore.
	DueFrom, DueBefore time.Time
	// Parked, when true, lists only parked timeouts (see Parker).
	Parked bool
	// After, when its ID is set, starts the page after the timeout with that due time and id in
	// List's order (due time, then id): pass the last timeout of the previous page. Paging so is
	// stable while timeouts come and go: none is listed twice, and none that stays pending while
	// the pages are read is skipped.
	After Position
}

// Position is a timeout's place in List's order.
type Position struct {
	Due time.Time
	ID  string
}

// Inspector is an optional interface that may be implemented by a [Store]: it describes the
// store's contents to operators and to timeouts.Manager's Stats and List. If a Store does not
// implement Inspector, those calls return ErrUnsupported. Every backend of this module
// implements it.
type Inspector interface {
	// Stats counts what is stored at now, exactly. It may read the whole table (PostgreSQL's
	// reads only as much as it counts): it is for operators and scrapes, not for a poll loop.
	Stats(ctx context.Context, now time.Time) (Stats, error)
	// List returns a page of timeouts in due time order, then id, without their payloads.
	List(ctx context.Context, opts ListOptions) ([]Timeout, error)
}

// Counter is an optional interface that may be implemented by an [Inspector]: Count returns
// what Stats would as Pending and Parked, exactly, at a cost that does not grow with what the
// store holds. The manager's pending and parked gauges call it, when the store has it, on every
// scrape instead of Stats. PostgreSQL's store implements it.
type Counter interface {
	Count(ctx context.Context) (pending, parked int, err error)
}

// DueCounter is an optional interface that may be implemented by an [Inspector]: CountDue counts
// exactly how many timeouts are due before each of several bounds, in one call, where a caller
// would otherwise estimate from a List of the earliest ones (the dashboard's "due in the next
// minute, hour, day"). If an Inspector does not implement DueCounter, or CountDue returns
// ErrUnsupported, callers count from such a List and say the counts are estimates.
//
// PostgreSQL's reads the table of dues per minute its Stats reads, and one minute of its due
// index per bound: its cost does not grow with how many timeouts are due. MySQL/MariaDB's and
// SQLite's read the timeouts due before the latest bound (the whole table without an index on
// due times), as their Stats reads the whole table; the memory store's reads its map. SQL
// Server's returns ErrUnsupported.
type DueCounter interface {
	// CountDue returns, for each of bounds, the number of stored timeouts that are not parked
	// and are due before it (Due < bound), claimed or not: counts[i] is bounds[i]'s. The bounds
	// may come in any order; each must be in MinDue..MaxDue (ErrInvalidTimeout otherwise).
	CountDue(ctx context.Context, bounds []time.Time) (counts []int, err error)
}

// OwnerCounter is an optional interface that may be implemented by an [Inspector]: CountOwners
// counts exactly the pending timeouts of the owners that have the most, and those without an
// owner, where a caller would otherwise count a List of the earliest due timeouts (the
// dashboard's owners). If an Inspector does not implement OwnerCounter, or CountOwners returns
// ErrUnsupported, callers count such a List and say the counts are estimates.
//
// PostgreSQL's reads a table of pending timeouts per owner that its count triggers keep, by an
// index on the counts: its cost grows with limit, not with how many timeouts or owners there are.
// The memory store's reads its map.
type OwnerCounter interface {
	// CountOwners returns the limit owners (0 for none) with the most pending timeouts, claimed
	// and parked ones included, and how many pending timeouts have no owner.
	CountOwners(ctx context.Context, limit int) (OwnerCounts, error)
}

// OwnerCounts is what OwnerCounter.CountOwners returns.
type OwnerCounts struct {
	// Top lists the owners with the most pending timeouts, most first, then by owner (byte
	// order); it is never nil.
	Top []OwnerCount
	// NoOwner counts the pending timeouts without an owner.
	NoOwner int
}

// OwnerCount is how many pending timeouts an owner has.
type OwnerCount struct {
	Owner string
	Count int
}

// HiddenFrom is the earliest end of a hidden timeout's claim: Handover.Hide claims timeouts until
// a mark at or after it, which no poller's now reaches, so they stay with whoever hid them.
var HiddenFrom = time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC)

// Handover is implemented by stores whose timeouts can be handed over to another delayed-delivery
// mechanism (RabbitMQ's native delay) while timeout managers keep running on them: `timeoutmill
// migrate` hides a batch, sends it, then removes it. Peek, Remove and Cancel work on hidden
// timeouts as on any other. Parked timeouts (see Parker) are neither
// surveyed nor hidden: they stay in the store for an operator.
type Handover interface {
	// Survey describes the timeouts due at or after from (MinDue for all).
	Survey(ctx context.Context, from time.Time) (Survey, error)

	// Hide claims, until mark, up to limit timeouts that no poller holds at now: those due at or
	// after from that were never claimed or whose lease is over by now, and, whatever their due
	// time, those hidden by an earlier Hide with another mark (whose caller stopped without
	// removing or releasing them). It takes them in the order they became claimable, as ClaimDue
	// does (so those hidden before come last), and returns them whole, earliest due first. mark
	// must be at or after HiddenFrom and kept to the microsecond; a caller uses one mark for all
	// its Hide calls, so that none returns a timeout it hid already. Concurrent callers never get
	// the same timeout.
	Hide(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]Timeout, error)

	// Releaser puts back timeouts the caller hid and did not hand over.
	Releaser
}

// Survey describes the timeouts a Handover would hand over.
type Survey struct {
	// Count is how many timeouts there are.
	Count int
	// Latest is the latest due time; zero when Count is 0.
	Latest time.Time
	// Hidden is how many of them are hidden: claimed until HiddenFrom or later.
	Hidden int
	// Destinations counts the timeouts of each destination.
	Destinations map[string]int
}

// Clocked is an optional interface that may be implemented by a [Store] shared by processes on
// several machines: it tells the time on the store's own clock, the one clock that decides when a
// timeout is due.
//
// A timeout manager on a Clocked store measures its clock's offset to the store's (NTP-style,
// within half the round trip of Now) at least once per poll, passes ClaimDue a now on the store's
// clock, and holds every forward until the due time has passed on the store's clock: instances
// whose clocks differ never deliver early by it, and a clock that runs behind adds no lateness.
// If a Store does not implement Clocked, the manager's own clock (timeouts.Config.Clock) is the
// store's: right for a store kept in one process (memory) or on one machine (SQLite), whose
// instances all read the same clock. The SQL stores of this module on a database server
// (PostgreSQL, MySQL/MariaDB, SQL Server) implement it.
type Clocked interface {
	// Now returns the store's current time, read in one round trip. It is the time when the
	// store answers, not when a transaction began.
	Now(ctx context.Context) (time.Time, error)
}
