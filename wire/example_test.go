package wire_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/wire"
)

// A producer builds a delayed message by hand: the due time in HeaderExpire, the topic to
// deliver to in HeaderDestination, published to the endpoint's Timeouts queue. Another
// language sets the same two headers to the same strings.
func ExampleFormatExpire() {
	due := time.Date(2030, time.January, 2, 3, 4, 5, 500_000_000, time.FixedZone("CET", 3600))
	msg := message.NewMessage("0f8fad5b-d9cb-469f-a165-70867728950e", []byte(`{"order":42}`))
	msg.Metadata.Set(wire.HeaderExpire, wire.FormatExpire(due))
	msg.Metadata.Set(wire.HeaderDestination, "payment-reminders")
	// publisher.Publish(wire.TimeoutsQueue("billing"), msg)

	fmt.Println("publish to", wire.TimeoutsQueue("billing"))
	fmt.Println(wire.HeaderExpire, "=", msg.Metadata.Get(wire.HeaderExpire))
	fmt.Println(wire.HeaderExpire, "=", wire.FormatExpire(time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)))
	// Output:
	// publish to billing.Timeouts
	// timeout.expire = 2030-01-02T02:04:05.5Z
	// timeout.expire = 2030-01-02T03:04:05Z
}

// A consumer delays a message it received once more: it copies the headers that are its own,
// leaves out the routing headers of the first delay (HeaderDue among them), and sets new ones.
func ExampleIsRoutingHeader() {
	received := message.Metadata{
		wire.HeaderDue:   "2030-01-02T03:04:05Z", // set on delivery
		"correlation_id": "order-42",
		"traceparent":    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	again := message.NewMessage("7c9e6679-7425-40de-944b-e07fc1f90ae7", []byte(`{"order":42}`))
	for k, v := range received {
		if !wire.IsRoutingHeader(k) {
			again.Metadata.Set(k, v)
		}
	}
	again.Metadata.Set(wire.HeaderExpire, wire.FormatExpire(time.Date(2030, time.January, 3, 0, 0, 0, 0, time.UTC)))
	again.Metadata.Set(wire.HeaderDestination, "payment-reminders")

	keys := make([]string, 0, len(again.Metadata))
	for k := range again.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("%s routing=%t\n", k, wire.IsRoutingHeader(k))
	}
	// Output:
	// correlation_id routing=false
	// timeout.destination routing=true
	// timeout.expire routing=true
	// traceparent routing=false
}
