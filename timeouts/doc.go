// Package timeouts gives a Watermill application durable delayed delivery by emulating the
// NServiceBus timeout manager. Mark a message with DeliverAt or DeliverAfter (or Watermill's
// delay.Message) and publish it through a Publisher: it travels to the endpoint's Timeouts queue,
// is stored, and is forwarded unchanged to its topic when due — after a restart too, with a
// durable store.
//
//	manager, err := timeouts.NewManager(timeouts.Config{
//		Endpoint:   "orders",
//		Store:      store, // persistence/sqlite, postgres, mysql, sqlserver or memory
//		Publisher:  pubSub,
//		Subscriber: pubSub,
//	}, logger)
//	_ = manager.AddToRouter(router)
//	go router.Run(ctx)
//
//	msg := message.NewMessage(watermill.NewUUID(), payload)
//	timeouts.DeliverAfter(msg, 30*time.Second)
//	err = manager.Publisher().Publish("payments.timeout", msg)
package timeouts
