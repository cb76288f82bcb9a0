package nats_test

import (
	"context"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/native/nats"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// A reminder delivered to the subject "reminders" in 90 minutes by the NATS server itself, then
// cancelled. It needs a server, so it is compiled, not run.
func Example() {
	ctx := context.Background()
	pub, err := nats.NewPublisher(nats.Config{URL: "nats://localhost:4222"}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Setup(ctx); err != nil { // once; or `timeoutmill native setup --transport nats://localhost:4222`
		log.Fatal(err)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":42}`))
	timeouts.DeliverAfter(msg, 90*time.Minute)
	if err := pub.Publish("reminders", msg); err != nil {
		log.Fatal(err)
	}
	if err := pub.Cancel(ctx, msg.UUID); err != nil { // nats.ErrNotScheduled once it fired
		log.Fatal(err)
	}
}
