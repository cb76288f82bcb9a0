package timeouts_test

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ExampleDeliverAt marks a message for a fixed time. The time may be in any zone; the header
// keeps it in UTC to the microsecond, rounded up, so that it is never delivered earlier than
// asked. Publish the message through Manager.Publisher or NewPublisher for the delay to be
// honoured.
func ExampleDeliverAt() {
	msg := message.NewMessage(watermill.NewUUID(), []byte("order 42 not paid yet?"))
	at := time.Date(2030, time.March, 1, 14, 3, 7, 250_000_400, time.FixedZone("CET", 60*60))
	timeouts.DeliverAt(msg, at)

	fmt.Println(wire.HeaderExpire, "=", msg.Metadata.Get(wire.HeaderExpire))
	// Output: timeout.expire = 2030-03-01T13:03:07.250001Z
}

// ExampleDeliverAfter marks a message to be delivered 30 s from now. It sets the same header as
// DeliverAt, an absolute time: the delay counts from the call, not from the publish.
func ExampleDeliverAfter() {
	msg := message.NewMessage(watermill.NewUUID(), []byte("order 42 not paid yet?"))
	now := time.Now()
	timeouts.DeliverAfter(msg, 30*time.Second)

	due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(wire.HeaderExpire))
	if err != nil {
		panic(err)
	}
	fmt.Println(wire.HeaderExpire, "is due in", due.Sub(now).Round(time.Second))
	// Output: timeout.expire is due in 30s
}
