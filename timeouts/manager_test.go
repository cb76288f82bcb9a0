package timeouts_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

const endpoint = "orders"

type testBundle struct {
	pubSub  *gochannel.GoChannel
	store   persistence.Store
	manager *timeouts.Manager
	router  *message.Router
}

// setup runs a manager for endpoint on a fresh GoChannel and router; mutate adjusts its config.
func setup(t *testing.T, store persistence.Store, mutate func(*timeouts.Config)) *testBundle {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	return start(t, pubSub, store, mutate)
}

// start runs a manager on an existing Pub/Sub, as a restarted process would.
func start(t *testing.T, pubSub *gochannel.GoChannel, store persistence.Store, mutate func(*timeouts.Config)) *testBundle {
	t.Helper()
	cfg := timeouts.Config{
		Endpoint:   endpoint,
		Store:      store,
		Publisher:  pubSub,
		Subscriber: pubSub,
		RetryDelay: 20 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	manager, err := timeouts.NewManager(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var runErr error
	go func() {
		defer close(stopped)
		runErr = router.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		_ = router.Close()
		<-stopped
	})
	select {
	case <-router.Running():
	case <-stopped:
		t.Fatalf("router stopped at start: %v", runErr)
	}
	return &testBundle{pubSub: pubSub, store: store, manager: manager, router: router}
}

// receive subscribes to topic and returns arrivals as they come, each stamped on arrival.
type arrival struct {
	msg *message.Message
	at  time.Time
}

func subscribe(t *testing.T, pubSub message.Subscriber, topic string) <-chan arrival {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := pubSub.Subscribe(ctx, topic)
	require.NoError(t, err)
	out := make(chan arrival, 1024)
	go func() {
		for m := range msgs {
			out <- arrival{msg: m, at: time.Now()}
			m.Ack()
		}
	}()
	return out
}

func await(t *testing.T, ch <-chan arrival, within time.Duration) arrival {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return arrival{}
	}
}

func requireNothing(t *testing.T, ch <-chan arrival, during time.Duration) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("unexpected message %s (%v)", a.msg.UUID, a.msg.Metadata)
	case <-time.After(during):
	}
}

func TestDelayedMessageIsDeliveredWhenDueAndNotBefore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		delivered := subscribe(t, b.pubSub, "payments")

		msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 42"))
		msg.Metadata.Set("trace-id", "abc-ünïcödé")
		due := time.Now().Add(700 * time.Millisecond)
		timeouts.DeliverAt(msg, due)
		require.NoError(t, b.manager.Publisher().Publish("payments", msg))

		got := await(t, delivered, 10*time.Second)
		require.False(t, got.at.Before(due), "delivered %s early", due.Sub(got.at))
		require.Less(t, got.at.Sub(due), 3*time.Second, "generous bound on lateness")
		require.Equal(t, msg.UUID, got.msg.UUID)
		require.Equal(t, "charge order 42", string(got.msg.Payload))
		require.Equal(t, "abc-ünïcödé", got.msg.Metadata.Get("trace-id"))
		for _, h := range []string{wire.HeaderExpire, wire.HeaderDestination} {
			_, has := got.msg.Metadata[h]
			require.False(t, has, "routing header %s must be removed", h)
		}

		st, err := b.store.(persistence.Inspector).Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			st, err = b.store.(persistence.Inspector).Stats(context.Background(), time.Now())
			return err == nil && st.Pending == 0
		}, 5*time.Second, 10*time.Millisecond, "a dispatched timeout is removed")
	})
}

func TestManyDelaysArriveInOrderNeverEarly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		delivered := subscribe(t, b.pubSub, "reminders")

		start := time.Now()
		dues := map[string]time.Time{}
		for i, d := range []time.Duration{900, 300, 600, 100, 1200} {
			msg := message.NewMessage(watermill.NewUUID(), []byte{byte(i)})
			due := start.Add(d * time.Millisecond)
			timeouts.DeliverAt(msg, due)
			dues[msg.UUID] = wireparse.RoundUp(due)
			require.NoError(t, b.manager.Publisher().Publish("reminders", msg))
		}
		for range dues {
			got := await(t, delivered, 10*time.Second)
			due := dues[got.msg.UUID]
			require.False(t, got.at.Before(due), "message %s arrived %s early", got.msg.UUID, due.Sub(got.at))
		}
	})
}

func TestPollerWakesForEarlierTimeoutWithinLongPollInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), func(c *timeouts.Config) { c.PollInterval = time.Hour })
		delivered := subscribe(t, b.pubSub, "t")

		late := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(late, 30*time.Minute)
		require.NoError(t, b.manager.Publisher().Publish("t", late))
		time.Sleep(200 * time.Millisecond) // fake time: the poller is now asleep until the late one is due

		early := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(early, 300*time.Millisecond)
		require.NoError(t, b.manager.Publisher().Publish("t", early))

		got := await(t, delivered, 5*time.Second)
		require.Equal(t, early.UUID, got.msg.UUID, "a newly stored earlier timeout must wake the poller")
	})
}

func TestDelayIntoThePastIsDeliveredAtOnce(t *testing.T) {
	t.Parallel()
	// Not in a synctest bubble: its fake clock starts in 2000, and the test needs 2001 past.
	b := setup(t, memory.New(), nil)
	delivered := subscribe(t, b.pubSub, "audit")

	msg := message.NewMessage(watermill.NewUUID(), []byte("late"))
	timeouts.DeliverAt(msg, time.Now().Add(-time.Hour))
	sent := time.Now()
	require.NoError(t, b.manager.Publisher().Publish("audit", msg))
	got := await(t, delivered, 5*time.Second)
	require.Less(t, got.at.Sub(sent), time.Second)
	require.Empty(t, got.msg.Metadata.Get(wire.HeaderExpire))

	// Published straight to the Timeouts queue, as another process would, it is delivered too.
	direct := message.NewMessage(watermill.NewUUID(), []byte("via timeouts queue"))
	direct.Metadata.Set(wire.HeaderExpire, "2001-02-03T04:05:06.789+02:00")
	direct.Metadata.Set(wire.HeaderDestination, "audit")
	require.NoError(t, b.pubSub.Publish(wire.TimeoutsQueue(endpoint), direct))
	got = await(t, delivered, 5*time.Second)
	require.Equal(t, direct.UUID, got.msg.UUID)

	// Far past, before any store's range, is simply due.
	ancient := message.NewMessage(watermill.NewUUID(), []byte("year one"))
	ancient.Metadata.Set(wire.HeaderExpire, "0001-01-01T00:00:00Z")
	ancient.Metadata.Set(wire.HeaderDestination, "audit")
	require.NoError(t, b.pubSub.Publish(wire.TimeoutsQueue(endpoint), ancient))
	require.Equal(t, ancient.UUID, await(t, delivered, 5*time.Second).msg.UUID)
}

func TestUndelayedMessagePassesStraightThrough(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		delivered := subscribe(t, b.pubSub, "plain")
		msg := message.NewMessage(watermill.NewUUID(), []byte("now"))
		require.NoError(t, b.manager.Publisher().Publish("plain", msg))
		got := await(t, delivered, 5*time.Second)
		require.Equal(t, msg.UUID, got.msg.UUID)

		st, err := b.store.(persistence.Inspector).Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending, "an undelayed message never touches the store")
	})
}

func TestWatermillDelayMessageIsHonouredAndNeverEarly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		delivered := subscribe(t, b.pubSub, "legacy")

		msg := message.NewMessage(watermill.NewUUID(), []byte("from components/delay"))
		intended := time.Now().Add(1500 * time.Millisecond)
		delay.Message(msg, delay.For(1500*time.Millisecond)) // whole seconds on the wire
		require.NoError(t, b.manager.Publisher().Publish("legacy", msg))

		got := await(t, delivered, 10*time.Second)
		require.False(t, got.at.Before(intended), "Watermill's truncated key must not make us early")
		require.Less(t, got.at.Sub(intended), 2*time.Second)
		for _, h := range []string{wire.HeaderWatermillDelayedUntil, wire.HeaderWatermillDelayedFor, wire.HeaderExpire, wire.HeaderDestination} {
			require.NotContains(t, got.msg.Metadata, h, "a delivered message carries no delay header")
		}
	})
}

func TestRedeliveredTimeoutsMessageMakesOneTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		delivered := subscribe(t, b.pubSub, "once")

		msg := message.NewMessage(watermill.NewUUID(), []byte("exactly one"))
		msg.Metadata.Set(wire.HeaderExpire, wireparse.FormatExpire(time.Now().Add(500*time.Millisecond)))
		msg.Metadata.Set(wire.HeaderDestination, "once")
		for range 3 { // the broker redelivers the same message
			require.NoError(t, b.pubSub.Publish(wire.TimeoutsQueue(endpoint), msg.Copy()))
		}
		got := await(t, delivered, 5*time.Second)
		require.Equal(t, msg.UUID, got.msg.UUID)
		requireNothing(t, delivered, time.Second)
	})
}

func TestPoisonMessagesReachTheErrorQueueWithAReason(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		errs := subscribe(t, b.pubSub, "error")
		delivered := subscribe(t, b.pubSub, "dest")

		cases := []struct {
			name    string
			headers map[string]string
			reason  string
		}{
			{"garbage expire", map[string]string{wire.HeaderExpire: "tomorrow-ish", wire.HeaderDestination: "dest"}, "is not an RFC 3339 time"},
			{"empty expire", map[string]string{wire.HeaderExpire: "", wire.HeaderDestination: "dest"}, "timeout.expire is empty"},
			{"beyond year 9999", map[string]string{wire.HeaderExpire: "10000-01-01T00:00:00Z", wire.HeaderDestination: "dest"}, "is out of range"},
			{"missing destination", map[string]string{wire.HeaderExpire: wireparse.FormatExpire(time.Now())}, "timeout.destination is missing"},
			{"empty destination", map[string]string{wire.HeaderExpire: wireparse.FormatExpire(time.Now()), wire.HeaderDestination: " "}, "timeout.destination is empty"},
			{"no delay at all", map[string]string{wire.HeaderDestination: "dest"}, "neither timeout.expire nor _watermill_delayed_until is set"},
		}
		for _, c := range cases {
			msg := message.NewMessage(watermill.NewUUID(), []byte(c.name))
			for k, v := range c.headers {
				msg.Metadata.Set(k, v)
			}
			require.NoError(t, b.pubSub.Publish(wire.TimeoutsQueue(endpoint), msg))
			got := await(t, errs, 5*time.Second)
			require.Equal(t, msg.UUID, got.msg.UUID, c.name)
			require.Equal(t, c.name, string(got.msg.Payload), "body unchanged")
			require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), c.reason, c.name)
			require.Equal(t, wire.TimeoutsQueue(endpoint), got.msg.Metadata.Get(wire.HeaderFailureQueue), c.name)
		}

		// A malformed dispatcher message is not retried forever either.
		require.NoError(t, b.pubSub.Publish(wire.DispatcherQueue(endpoint), message.NewMessage(watermill.NewUUID(), nil)))
		got := await(t, errs, 5*time.Second)
		require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), "empty payload")
		require.Equal(t, wire.DispatcherQueue(endpoint), got.msg.Metadata.Get(wire.HeaderFailureQueue))

		// An unknown id is a timeout already dispatched: acked, nothing sent anywhere.
		require.NoError(t, b.pubSub.Publish(wire.DispatcherQueue(endpoint), message.NewMessage(watermill.NewUUID(), []byte("no-such-id"))))
		requireNothing(t, errs, 300*time.Millisecond)
		requireNothing(t, delivered, 0)

		// The satellites keep serving after all that.
		ok := message.NewMessage(watermill.NewUUID(), []byte("fine"))
		timeouts.DeliverAfter(ok, 10*time.Millisecond)
		require.NoError(t, b.manager.Publisher().Publish("dest", ok))
		require.Equal(t, ok.UUID, await(t, delivered, 5*time.Second).msg.UUID)
	})
}

func TestReusedUUIDForAnotherDestinationIsNotLost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		errs := subscribe(t, b.pubSub, "error")
		dests := map[string]<-chan arrival{"a": subscribe(t, b.pubSub, "a"), "b": subscribe(t, b.pubSub, "b")}

		msg := message.NewMessage(watermill.NewUUID(), []byte("fan out"))
		timeouts.DeliverAfter(msg, 400*time.Millisecond)
		require.NoError(t, b.manager.Publisher().Publish("a", msg))
		require.NoError(t, b.manager.Publisher().Publish("b", msg))

		// GoChannel does not order the two; whichever is stored second is refused, never dropped.
		rejected := await(t, errs, 5*time.Second)
		require.Contains(t, rejected.msg.Metadata.Get(wire.HeaderFailureReason), "reuses its UUID")
		refusedFor := rejected.msg.Metadata.Get(wire.HeaderDestination)
		require.Contains(t, []string{"a", "b"}, refusedFor)
		storedFor := map[string]string{"a": "b", "b": "a"}[refusedFor]
		require.Equal(t, msg.UUID, await(t, dests[storedFor], 5*time.Second).msg.UUID)
		requireNothing(t, dests[refusedFor], 300*time.Millisecond)
	})
}

func TestCancelledTimeoutIsNeverDelivered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		delivered := subscribe(t, b.pubSub, "payments")
		ctx := context.Background()

		byID := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(byID, 500*time.Millisecond)
		byOwner := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(byOwner, 500*time.Millisecond)
		timeouts.WithOwner(byOwner, "order-7")
		kept := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(kept, 600*time.Millisecond)
		require.NoError(t, b.manager.Publisher().Publish("payments", byID, byOwner, kept))

		require.Eventually(t, func() bool {
			st, err := b.store.(persistence.Inspector).Stats(ctx, time.Now())
			return err == nil && st.Pending == 3
		}, 5*time.Second, 5*time.Millisecond)
		cancelled, err := b.manager.Cancel(ctx, byID.UUID)
		require.NoError(t, err)
		require.True(t, cancelled)
		n, err := b.manager.CancelByOwner(ctx, "order-7")
		require.NoError(t, err)
		require.Equal(t, 1, n)

		require.Equal(t, kept.UUID, await(t, delivered, 5*time.Second).msg.UUID)
		requireNothing(t, delivered, 500*time.Millisecond)
	})
}

func TestRestartKeepsTimeouts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// The store outlives the process. GoChannel does not (closing the router closes it), so the
		// restarted process gets a new one, as it would a new broker connection.
		store := memory.New().(memStore)
		first := setup(t, store, nil)
		msg := message.NewMessage(watermill.NewUUID(), []byte("survives"))
		timeouts.DeliverAfter(msg, 1500*time.Millisecond)
		require.NoError(t, first.manager.Publisher().Publish("later", msg))
		require.Eventually(t, func() bool {
			st, err := store.Stats(context.Background(), time.Now())
			return err == nil && st.Pending == 1
		}, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, first.router.Close())
		<-first.manager.Done()

		pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		t.Cleanup(func() { _ = pubSub.Close() })
		delivered := subscribe(t, pubSub, "later")
		start(t, pubSub, store, nil)
		got := await(t, delivered, 10*time.Second)
		require.Equal(t, msg.UUID, got.msg.UUID)
		require.Equal(t, "survives", string(got.msg.Payload))
	})
}

func TestForwardFailureGoesToErrorQueueAfterNumberOfRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		t.Cleanup(func() { _ = pubSub.Close() })
		failing := &failingDestination{Publisher: pubSub, topic: "broken"}
		store := memory.New().(memStore)
		b := start(t, pubSub, store, func(c *timeouts.Config) {
			c.Publisher = failing
			c.NumberOfRetries = 2
		})
		errs := subscribe(t, pubSub, "error")

		msg := message.NewMessage(watermill.NewUUID(), []byte("undeliverable"))
		timeouts.DeliverAfter(msg, 50*time.Millisecond)
		require.NoError(t, b.manager.Publisher().Publish("broken", msg))

		got := await(t, errs, 10*time.Second)
		require.Equal(t, msg.UUID, got.msg.UUID)
		require.Equal(t, "3", got.msg.Metadata.Get(wire.HeaderFailureAttempts))
		require.Equal(t, "broken", got.msg.Metadata.Get(wire.HeaderDestination))
		require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), "failed after 3 attempts")
		require.Equal(t, 3, failing.attempts(), "NumberOfRetries + 1 attempts, not MSMQ's N+2")
		// The timeout is removed after the error queue took the message, which may arrive first.
		require.Eventually(t, func() bool {
			_, err := store.Peek(context.Background(), msg.UUID)
			return errors.Is(err, persistence.ErrNotFound)
		}, 5*time.Second, 5*time.Millisecond, "the timeout leaves the store once on the error queue")
	})
}

// failingDestination fails every publish to one topic.
type failingDestination struct {
	message.Publisher
	topic string
	mu    sync.Mutex
	n     int
}

func (f *failingDestination) Publish(topic string, msgs ...*message.Message) error {
	if topic == f.topic {
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
		return errors.New("destination refused the message")
	}
	return f.Publisher.Publish(topic, msgs...)
}

func (f *failingDestination) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

var _ = critical.FetchMessage
