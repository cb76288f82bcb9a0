// Package nats delays messages in NATS JetStream itself, with the server's message schedules
// (nats-server 2.12 or later), instead of storing them in a database until they are due.
//
//	pub, err := nats.NewPublisher(nats.Config{URL: "nats://localhost:4222"}, logger)
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	if err := pub.Setup(ctx); err != nil { // or `timeoutmill native setup --transport nats://…` once
//		return err
//	}
//	msg := message.NewMessage(watermill.NewUUID(), payload)
//	timeouts.DeliverAfter(msg, 90*time.Minute)
//	err = pub.Publish("orders", msg) // arrives on subject "orders" in 90 minutes
package nats
