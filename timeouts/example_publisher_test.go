package timeouts_test

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/timeouts"
)

// recorder stands in for a broker's message.Publisher (AMQP, SQL, Kafka...): it prints what it
// is asked to publish, with the headers sorted.
type recorder struct{}

func (recorder) Publish(topic string, messages ...*message.Message) error {
	for _, msg := range messages {
		fmt.Printf("%s: %q", topic, msg.Payload)
		for _, key := range slices.Sorted(maps.Keys(msg.Metadata)) {
			fmt.Printf(" %s=%s", key, msg.Metadata[key])
		}
		fmt.Println()
	}
	return nil
}

func (recorder) Close() error { return nil }

// ExampleNewPublisher is a process that only produces: it runs no Manager, and its publisher
// routes the delayed messages to the orders endpoint's Timeouts queue, with the due time and the
// destination in headers. Whatever process runs that endpoint's Manager (or the timeoutmill
// command) stores them and delivers them when due. Messages without a delay, or already due, go
// straight to their topic, without the routing headers.
func ExampleNewPublisher() {
	pub, err := timeouts.NewPublisher(recorder{}, "orders")
	if err != nil {
		panic(err)
	}

	reminder := message.NewMessage("reminder-42", []byte("order 42 not paid yet?"))
	timeouts.DeliverAt(reminder, time.Date(2100, time.January, 2, 15, 4, 5, 0, time.UTC))
	if err := pub.Publish("reminders", reminder); err != nil {
		panic(err)
	}

	late := message.NewMessage("reminder-7", []byte("order 7 not paid yet?"))
	timeouts.DeliverAt(late, time.Date(2000, time.January, 2, 15, 4, 5, 0, time.UTC)) // due already
	if err := pub.Publish("reminders", late); err != nil {
		panic(err)
	}

	paid := message.NewMessage("paid-42", []byte("order 42 paid"))
	if err := pub.Publish("payments", paid); err != nil {
		panic(err)
	}
	// Output:
	// orders.Timeouts: "order 42 not paid yet?" timeout.destination=reminders timeout.expire=2100-01-02T15:04:05Z
	// reminders: "order 7 not paid yet?"
	// payments: "order 42 paid"
}
