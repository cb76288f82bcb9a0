package sqlstore

import (
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// The inputs of each kind of statement, by name. A statement uses exactly the names its Params
// give (Compile checks it), so a value cannot land in another's place.

// NoParams are the inputs of a statement that takes none.
type NoParams struct{}

// Bind gives nothing.
func (NoParams) Bind(*Binder) {}

// IDParams name one timeout: @id.
type IDParams struct{ ID string }

// Bind gives @id.
func (p IDParams) Bind(b *Binder) { b.Text("id", p.ID) }

// OwnerParams name an owner: @owner.
type OwnerParams struct{ Owner string }

// Bind gives @owner.
func (p OwnerParams) Bind(b *Binder) { b.Text("owner", p.Owner) }

// KeyParams name a deduplication key: @key.
type KeyParams struct{ Key string }

// Bind gives @key.
func (p KeyParams) Bind(b *Binder) { b.Text("key", p.Key) }

// NowParams are a time to count at: @now.
type NowParams struct{ Now time.Time }

// Bind gives @now.
func (p NowParams) Bind(b *Binder) { b.Time("now", p.Now) }

// StoreParams are a timeout's columns as Store inserts them: @id, @destination, @due (its due
// time and first available_at), @owner, @state (the payload), @headers (the metadata encoded)
// and @failureCount.
type StoreParams struct {
	ID, Destination, Owner string
	// Due is whole microseconds, in UTC.
	Due time.Time
	// Payload is not nil; Metadata is encoded.
	Payload, Metadata []byte
	FailureCount      int
}

// Bind gives Store's names.
func (p StoreParams) Bind(b *Binder) {
	b.Text("id", p.ID)
	b.Text("destination", p.Destination)
	b.Time("due", p.Due)
	b.Text("owner", p.Owner)
	b.Bytes("state", p.Payload)
	b.Bytes("headers", p.Metadata)
	b.Int("failureCount", p.FailureCount)
}

// ScheduleParams are Store's, and @key, NULL for none.
type ScheduleParams struct {
	StoreParams
	Key string
}

// Bind gives Store's names and @key.
func (p ScheduleParams) Bind(b *Binder) {
	p.StoreParams.Bind(b)
	b.NullText("key", p.Key)
}

// ClaimParams are a claim's: claimable at @now, claimed @until, at most @limit rows, by @by (the
// claiming instance, NULL for none).
type ClaimParams struct {
	Now, Until time.Time
	Limit      int
	By         string
}

// Bind gives a claim's names.
func (p ClaimParams) Bind(b *Binder) {
	b.Time("now", p.Now)
	b.Time("until", p.Until)
	b.Int("limit", p.Limit)
	b.NullText("by", p.By)
}

// HideParams are a Hide's: rows due at or after @from that no poller holds at @now, at most
// @limit, moved to @mark; @hiddenFrom is persistence.HiddenFrom, where hidden rows begin.
type HideParams struct {
	Now, From, Mark time.Time
	Limit           int
}

// Bind gives a Hide's names.
func (p HideParams) Bind(b *Binder) {
	b.Time("now", p.Now)
	b.Time("from", p.From)
	b.Time("mark", p.Mark)
	b.Int("limit", p.Limit)
	b.Time("hiddenFrom", persistence.HiddenFrom)
}

// RescheduleParams move the timeout @id, pending at @now, to @due.
type RescheduleParams struct {
	ID       string
	Due, Now time.Time
}

// Bind gives a Reschedule's names.
func (p RescheduleParams) Bind(b *Binder) {
	b.Text("id", p.ID)
	b.Time("due", p.Due)
	b.Time("now", p.Now)
}

// SurveyParams describe the timeouts due at or after @from; @hiddenFrom is
// persistence.HiddenFrom.
type SurveyParams struct{ From time.Time }

// Bind gives a Survey's names.
func (p SurveyParams) Bind(b *Binder) {
	b.Time("from", p.From)
	b.Time("hiddenFrom", persistence.HiddenFrom)
}

// ParkParams set the timeout @id aside with @reason; @parkedAt is persistence.MaxDue.
type ParkParams struct{ ID, Reason string }

// Bind gives a Park's names.
func (p ParkParams) Bind(b *Binder) {
	b.Text("id", p.ID)
	b.Text("reason", p.Reason)
	b.Time("parkedAt", persistence.MaxDue)
}

// InstanceParams name the claims of @instance; @hiddenFrom is persistence.HiddenFrom.
type InstanceParams struct{ Instance string }

// Bind gives ReleaseClaimsOf's names.
func (p InstanceParams) Bind(b *Binder) {
	b.Text("instance", p.Instance)
	b.Time("hiddenFrom", persistence.HiddenFrom)
}
