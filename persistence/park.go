package persistence

import (
	"context"
	"errors"
	"time"
)

// Parker is an optional interface that may be implemented by a [Store]: it sets aside a timeout
// that can be neither forwarded nor copied to the error queue (a message bigger than the broker
// accepts, say), so that it is neither retried forever nor lost.
//
// A parked timeout keeps its row, its message and its reason (Timeout.Parked). No ClaimDue, Hide,
// Reschedule or Release returns or changes it, so it is never announced again; Peek and PeekMany
// return it with Parked set, Remove, Cancel and CancelByOwner delete it as any other,
// Inspector.List shows it (ListOptions.Parked lists only parked ones) and Inspector.Stats counts
// it in Parked. An operator replays it with Unpark once the cause is fixed, or deletes it with
// DeleteParked.
//
// If a Store does not implement Parker, the dispatcher retries such a timeout at the dispatch
// circuit breaker's pace until the breaker raises a critical error, as before parking existed.
// Every backend of this module implements it.
type Parker interface {
	// Park sets the timeout with that id aside with reason, which must not be empty, whether it
	// is claimed or not. It returns false when no timeout with that id is stored. Parking a
	// parked timeout again replaces its reason.
	Park(ctx context.Context, id, reason string) (bool, error)
	// Unpark makes the parked timeouts among ids claimable again from their due time (at once,
	// when it is past) with their FailureCount back at 0, and returns how many it unparked. Ids
	// not stored, or not parked, are ignored.
	Unpark(ctx context.Context, ids []string) (int, error)
	// DeleteParked deletes the parked timeouts among ids and returns how many it deleted. Ids
	// not stored, or not parked, are ignored: finding a timeout parked and deleting it are one
	// step, so one that another operator replays (Unpark) at the same moment is either deleted
	// while still parked or kept, pending, and delivered.
	DeleteParked(ctx context.Context, ids []string) (int, error)
}

// MaxParkReasonLength bounds what stores keep of a parking reason, in bytes; Park keeps the
// start of a longer one.
const MaxParkReasonLength = 2000

// ErrInstanceInUse is returned by Claimer.HoldInstance while another holder has the name: two
// running processes must not share an instance name. Callers test it with errors.Is; its text
// names the instance.
var ErrInstanceInUse = errors.New("persistence: instance name in use by another running process")

// Claimer is an optional interface that may be implemented by a [Store]: it records which
// instance claimed a timeout, so that an instance restarted under the same name after a crash
// takes its own claims back at once instead of waiting for their lease.
//
// A timeout manager with an instance name (timeouts.Config.Instance) holds that name
// (HoldInstance) for as long as it runs, releases what an earlier run of the name claimed
// (ReleaseClaimsOf) before it claims anything, and claims with ClaimDueAs. If a Store does not
// implement Claimer, ids claimed and not yet announced by a process that crashed wait for their
// claim's lease (timeouts.Config.ClaimLease) to run out: late, never lost.
type Claimer interface {
	// HoldInstance takes instance (not empty, at most MaxIDLength bytes) for the caller until
	// release is called, the store is closed or the process ends. Meanwhile another HoldInstance
	// of that name, by this process or another sharing the store, fails with an error wrapping
	// ErrInstanceInUse. A store that cannot tell processes apart documents what it detects.
	HoldInstance(ctx context.Context, instance string) (release func() error, err error)
	// ClaimDueAs claims as ClaimDue does, recording instance as the claims' holder. ClaimDue and
	// Handover.Hide record no holder.
	ClaimDueAs(ctx context.Context, instance string, now time.Time, limit int, lease time.Duration) ([]string, error)
	// ReleaseClaimsOf makes every timeout whose claim instance holds claimable again from its
	// due time, as Releaser.Release does, and returns how many it released. A claim given back
	// (Release) or, once its lease ran out, taken by another ClaimDue or ClaimDueAs is no longer
	// the instance's. Hidden and parked timeouts are left as they are.
	ReleaseClaimsOf(ctx context.Context, instance string) (int, error)
}
