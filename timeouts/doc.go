// Package timeouts gives a Watermill application durable delayed delivery by emulating the
// NServiceBus timeout manager. Mark a message with DeliverAt or DeliverAfter (or Watermill's
// delay.Message) and publish it through a Publisher: it travels to the endpoint's Timeouts queue,
// is stored, and is forwarded unchanged to its topic when due — after a restart too, with a
// durable store.
//
//	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
//	manager, err := timeouts.NewManager(timeouts.Config{
//		Endpoint:   "orders",
//		Store:      store, // persistence/sqlite, postgres, mysql, sqlserver or memory
//		Publisher:  pubSub,
//		Subscriber: pubSub,
//	}, logger)
//	_ = manager.AddToRouter(router)
//	go router.Run(ctx)
//	<-router.Running() // GoChannel drops what is published before anyone subscribes
//
//	msg := message.NewMessage(watermill.NewUUID(), payload)
//	timeouts.DeliverAfter(msg, 30*time.Second)
//	err = manager.Publisher().Publish("payments.timeout", msg)
//
// # Stopping
//
// Close the router, wait for Done, then close the store and the Pub/Sub:
//
//	_ = router.Close()
//	<-manager.Done()
//	_ = store.Close()
//
// The router's Close begins the manager's stop: the poller claims nothing more, forwards already
// started finish, and what the stop cuts short (an announcement, a forward on a GoChannel that
// closed under it) is not counted as a failed attempt and is left in the store, claimable at once
// by the next start (see persistence.Releaser). A stopped manager raises no critical error.
//
// # Stability
//
// This package's API is stable, and so is the behaviour its documentation states: the defaults, and
// what NewManager refuses (a new refusal is a Breaking change too). While timeoutmill is at v0, an
// incompatible change to it is made only with an entry marked Breaking in CHANGELOG.md that says
// how to migrate; from v1 on, only in a new major version. CI compares the exported API with the
// baseline in api/ and fails on an incompatible change that the CHANGELOG does not name
// (docs/releasing.md). The names and labels of the Prometheus metrics are kept in the same way; log
// lines are not part of the promise.
package timeouts
