package persistence

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"
)

// KeyPolicy says what Scheduler.Schedule does with a timeout whose Key a pending timeout holds.
type KeyPolicy int

const (
	// KeyReplace replaces the pending timeout: it is removed and the new one stored, in one
	// transaction, so that one delivery follows, at the new due time with the new message.
	KeyReplace KeyPolicy = iota
	// KeyKeep keeps the pending timeout and drops the new one as a duplicate.
	KeyKeep
)

// Validate reports a policy that is neither KeyReplace nor KeyKeep.
func (p KeyPolicy) Validate() error {
	if p != KeyReplace && p != KeyKeep {
		return fmt.Errorf("%w: unknown key policy %d", ErrInvalidTimeout, int(p))
	}
	return nil
}

// String names the policy as the wire contract does ("replace", "keep").
func (p KeyPolicy) String() string {
	switch p {
	case KeyReplace:
		return "replace"
	case KeyKeep:
		return "keep"
	}
	return "KeyPolicy(" + strconv.Itoa(int(p)) + ")"
}

// Outcome says what Scheduler.Schedule did.
type Outcome int

const (
	// Created: the timeout was stored.
	Created Outcome = iota + 1
	// Existed: a timeout with its id was stored already (a redelivery); nothing changed.
	Existed
	// Replaced: the timeout was stored in place of the pending one that held its key
	// (Scheduled.Replaced), which was removed.
	Replaced
	// Duplicate: a pending timeout holds the key (Scheduled.ID) and KeyKeep kept it; nothing
	// changed.
	Duplicate
)

// String names the outcome in lower case ("created").
func (o Outcome) String() string {
	switch o {
	case Created:
		return "created"
	case Existed:
		return "existed"
	case Replaced:
		return "replaced"
	case Duplicate:
		return "duplicate"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Scheduled is what Scheduler.Schedule did with a timeout.
type Scheduled struct {
	// ID is the id of the timeout that will be delivered: the scheduled one's, or with
	// Duplicate the pending one's that holds the key.
	ID      string
	Outcome Outcome
	// Replaced is the id of the timeout that Replaced removed.
	Replaced string
}

// Scheduler is an optional interface that may be implemented by a [Store]: the calls behind
// timeouts.Manager's Schedule and Reschedule, which resolve deduplication keys and move due
// times in place.
//
// A timeout is pending at now while no poller holds it: it was never claimed, or its claim's
// lease ran out by now. A claimed timeout is being delivered: Reschedule leaves it alone, and
// Schedule does not count it as holding its key (the new timeout is Created beside it, and the
// claimed one keeps no key).
//
// If a Store does not implement Scheduler, the manager stores timeouts without a key with Store
// and refuses keyed timeouts and Reschedule with ErrUnsupported. Every backend of this module
// implements it.
type Scheduler interface {
	// Schedule keeps t as Store does and returns once it is durable. When t.Key is set and a
	// pending timeout holds that key, policy decides: KeyReplace removes that one and stores t,
	// KeyKeep stores nothing. Concurrent calls with one key leave one pending timeout with it.
	Schedule(ctx context.Context, t Timeout, now time.Time, policy KeyPolicy) (Scheduled, error)

	// Reschedule moves the due time of the timeout with that id, pending at now, to due, keeping
	// its id, message and failure count. It returns false, and changes nothing, when no such
	// timeout is pending: it was delivered, cancelled or never stored, or a poller holds it (it
	// is being delivered at its old due time). due must be in MinDue..MaxDue.
	Reschedule(ctx context.Context, id string, due, now time.Time) (bool, error)
}

// TxScheduler is an optional interface that may be implemented by a [Store] kept in a SQL
// database: Schedule inside the caller's transaction, so that the timeout exists if and only if
// the transaction commits (a transactional outbox for timeouts). tx must be a transaction on
// the database the store keeps its table in. If a Store does not implement TxScheduler,
// timeouts.Manager.ScheduleTx returns ErrUnsupported. The PostgreSQL, MySQL/MariaDB, SQLite and
// SQL Server backends implement it.
//
// A ScheduleTx that meets a concurrent one for the same key may fail with the database's
// serialization or deadlock error, which the caller handles as for any of its transactions:
// roll back and run it again.
type TxScheduler interface {
	ScheduleTx(ctx context.Context, tx *sql.Tx, t Timeout, now time.Time, policy KeyPolicy) (Scheduled, error)
}
