// Package timeouts gives a Watermill application durable delayed delivery by emulating the
// NServiceBus timeout manager. Mark a message with DeliverAt or DeliverAfter (or Watermill's
// delay.Message) and publish it through a Publisher. It travels to the endpoint's Timeouts
// queue and is stored. When due it is forwarded unchanged to its topic. With a durable store,
// this holds after a restart too.
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
// The router's Close begins the manager's stop. The poller claims nothing more. Forwards
// already started finish. The stop may cut short an announcement, or a forward on a GoChannel
// that closed under it. That is not counted as a failed attempt. It is left in the store,
// claimable at once by the next start (see persistence.Releaser). A stopped manager raises no
// critical error.
//
// # Stability
//
// This package's API is stable. So is the behaviour its documentation states: the defaults, and
// what NewManager refuses. A new refusal is a Breaking change too. While timeoutmill is at v0,
// an incompatible change to it is made only with an entry marked Breaking in CHANGELOG.md. That
// entry says how to migrate. From v1 on, it is made only in a new major version. CI compares
// the exported API with the baseline in api/ (docs/releasing.md). It fails on an incompatible
// change that the CHANGELOG does not name. The names and labels of the Prometheus metrics are
// kept in the same way. Log lines are not part of the promise.
package timeouts
