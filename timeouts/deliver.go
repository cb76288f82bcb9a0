package timeouts

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// DeliverAt marks msg to be delivered no earlier than t. The time is kept to the microsecond
// (rounded up), unlike Watermill's delay.Message, which keeps whole seconds.
func DeliverAt(msg *message.Message, t time.Time) {
	msg.Metadata.Set(wire.HeaderExpire, wireparse.FormatExpire(wireparse.RoundUp(t)))
}

// DeliverAfter marks msg to be delivered no earlier than d from now. Now is the system clock of
// the producer. DeliverAfter has no manager, so no Config.Clock. It stamps an absolute time as
// DeliverAt does.
func DeliverAfter(msg *message.Message, d time.Duration) {
	DeliverAt(msg, time.Now().Add(d))
}

// WithOwner tags a delayed message with an owner key (a saga or order id), so that every pending
// timeout of that owner can be cancelled at once with Manager.CancelByOwner.
func WithOwner(msg *message.Message, owner string) {
	msg.Metadata.Set(wire.HeaderOwner, owner)
}
