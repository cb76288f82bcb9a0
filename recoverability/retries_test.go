package recoverability_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/wire"
)

// transports run a test on GoChannel, which hands a subscriber many messages at once, and on
// durable FIFO queues that hand over one at a time (as AMQP with prefetch 1 does), where the
// message the deferred queue's processor holds keeps the others back.
func transports(t *testing.T, test func(t *testing.T, ps pubSub)) {
	t.Run("GoChannel", func(t *testing.T) {
		t.Parallel()
		test(t, newGoChannel(t))
	})
	t.Run("durable FIFO queues", func(t *testing.T) {
		t.Parallel()
		test(t, newDurableQueues())
	})
}

// Shuttle's own check of its deferred queue: messages ignored for 3, 2 and 1 seconds are all back
// in the work queue within 3.5 seconds.
func TestShuttleDeferredMessagesAreBackWithinTheirTime(t *testing.T) {
	t.Parallel()
	transports(t, testShuttleDeferredMessages)
}

func testShuttleDeferredMessages(t *testing.T, ps pubSub) {
	b := start(t, ps, baseConfig(ps), nil)

	started := time.Now()
	until := map[string]time.Time{}
	for _, s := range []int{3, 2, 1} {
		msg := waiting(fmt.Sprintf("ignored for %d s", s), started.Add(time.Duration(s)*time.Second))
		until[msg.UUID] = started.Add(time.Duration(s) * time.Second)
		require.NoError(t, ps.Publish(workQueue, msg))
	}
	for id, due := range until {
		calls := b.calls.waitCalls(t, id, 1, 3500*time.Millisecond-time.Since(started))
		require.Len(t, calls, 1, "a waiting message is handled once, when due")
		require.False(t, calls[0].at.Before(due), "handled %s early", due.Sub(calls[0].at))
		require.Empty(t, calls[0].metadata.Get(wire.HeaderRetryIgnoreUntil), "the deferred queue returns it without its ignore-until")
		t.Logf("ignored until +%s, handled %s after that", due.Sub(started).Round(time.Millisecond), calls[0].at.Sub(due).Round(time.Millisecond))
	}
	require.Less(t, time.Since(started), 3500*time.Millisecond)
}

func TestFailingTwiceThenSucceedingIsRetriedOnScheduleAndNeverLost(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	errs := subscribe(t, ps, wire.DefaultErrorQueue)
	cfg := baseConfig(ps)
	cfg.DurationToIgnoreOnFailure = []time.Duration{time.Second, 2 * time.Second}
	b := start(t, ps, cfg, func(n int, msg *message.Message) error {
		if string(msg.Payload) == "flaky" && n <= 2 {
			return errRefused
		}
		return nil
	})

	flaky := message.NewMessage(watermill.NewUUID(), []byte("flaky"))
	flaky.Metadata.Set("trace-id", "abc-123")
	require.NoError(t, ps.Publish(workQueue, flaky))
	b.calls.waitCalls(t, flaky.UUID, 1, 5*time.Second)

	// While it waits, the subscriber is free: other messages are handled, not queued behind it.
	other := message.NewMessage(watermill.NewUUID(), []byte("other"))
	require.NoError(t, ps.Publish(workQueue, other))
	otherCall := b.calls.waitCalls(t, other.UUID, 1, 5*time.Second)[0]

	calls := b.calls.waitCalls(t, flaky.UUID, 3, 15*time.Second)
	require.Len(t, calls, 3)
	require.True(t, otherCall.at.Before(calls[1].at), "another message waited behind a delayed retry")
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), time.Second)
	require.GreaterOrEqual(t, calls[2].at.Sub(calls[1].at), 2*time.Second)
	for i, c := range calls {
		require.Equal(t, "abc-123", c.metadata.Get("trace-id"), "call %d: headers travel with the retry", i+1)
	}
	require.Equal(t, "1", calls[1].metadata.Get(wire.HeaderRetryDelayedRetries))
	require.Equal(t, "1", calls[1].metadata.Get(wire.HeaderRetryAttempts))
	require.Equal(t, "2", calls[2].metadata.Get(wire.HeaderRetryDelayedRetries))
	require.Equal(t, "2", calls[2].metadata.Get(wire.HeaderRetryAttempts))

	requireNothing(t, errs, 500*time.Millisecond)
	require.Len(t, b.calls.of(flaky.UUID), 3, "handled once more after it succeeded")
}

func TestAlwaysFailingEndsOnTheErrorQueueAfterEveryRetry(t *testing.T) {
	t.Parallel()
	for _, immediate := range []int{0, 2} {
		t.Run(fmt.Sprintf("ImmediateRetries=%d", immediate), func(t *testing.T) {
			t.Parallel()
			ps := newGoChannel(t)
			errs := subscribe(t, ps, "errors.orders")
			cfg := baseConfig(ps)
			cfg.ImmediateRetries = immediate
			cfg.ErrorQueue = "errors.orders"
			b := start(t, ps, cfg, func(n int, _ *message.Message) error {
				return fmt.Errorf("call %d: %w", n, errRefused)
			})

			msg := message.NewMessage(watermill.NewUUID(), []byte("doomed"))
			msg.Metadata.Set("tenant", "acme")
			require.NoError(t, ps.Publish(workQueue, msg))

			failed := await(t, errs, 10*time.Second).msg
			want := 1 + immediate + len(cfg.DurationToIgnoreOnFailure)
			require.Len(t, b.calls.of(msg.UUID), want)
			require.Equal(t, msg.UUID, failed.UUID)
			require.Equal(t, "doomed", string(failed.Payload))
			require.Equal(t, "acme", failed.Metadata.Get("tenant"))
			require.Equal(t, fmt.Sprintf("call %d: payment provider refused the charge", want), failed.Metadata.Get(wire.HeaderFailureReason))
			require.Equal(t, workQueue, failed.Metadata.Get(wire.HeaderFailureQueue))
			require.Equal(t, handlerName, failed.Metadata.Get(wire.HeaderFailureHandler))
			require.Equal(t, fmt.Sprint(want), failed.Metadata.Get(wire.HeaderFailureAttempts))
			require.Equal(t, "2", failed.Metadata.Get(wire.HeaderFailureDelayedRetries))
			at, err := time.Parse(time.RFC3339Nano, failed.Metadata.Get(wire.HeaderFailureTime))
			require.NoError(t, err)
			require.WithinDuration(t, time.Now(), at, time.Minute)
			for _, h := range []string{wire.HeaderRetryIgnoreUntil, wire.HeaderRetryAttempts, wire.HeaderRetryDelayedRetries, "retry.deferred_pass"} {
				require.NotContains(t, failed.Metadata, h, "a message returned from the error queue starts afresh")
			}

			requireNothing(t, errs, 800*time.Millisecond)
			require.Len(t, b.calls.of(msg.UUID), want, "never called again")
		})
	}
}

func TestPanicCountsAsAFailure(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	errs := subscribe(t, ps, wire.DefaultErrorQueue)
	cfg := baseConfig(ps)
	cfg.ImmediateRetries = 1
	cfg.DurationToIgnoreOnFailure = []time.Duration{}
	b := start(t, ps, cfg, func(int, *message.Message) error { panic("nil map") })

	msg := message.NewMessage(watermill.NewUUID(), nil)
	require.NoError(t, ps.Publish(workQueue, msg))
	failed := await(t, errs, 10*time.Second).msg
	require.Equal(t, "handler panicked: nil map", failed.Metadata.Get(wire.HeaderFailureReason))
	require.Len(t, b.calls.of(msg.UUID), 2)
}

func TestDeferredQueueDoesNotSpinOnMessagesThatAreNotDue(t *testing.T) {
	t.Parallel()
	transports(t, testNoSpin)
}

func testNoSpin(t *testing.T, ps pubSub) {
	counting := &countingPublisher{Publisher: ps}
	cfg := baseConfig(ps)
	cfg.Publisher = counting
	b := start(t, ps, cfg, nil)
	deferred := b.retries.DeferredQueue()

	const n = 5
	for i := range n {
		require.NoError(t, ps.Publish(workQueue, waiting(fmt.Sprint(i), time.Now().Add(time.Hour))))
	}
	// Each message is moved in once, and put back at most once by the pass that finds it (a
	// message arriving between passes is simply held); then the processor waits for the hour.
	require.Eventually(t, func() bool { return counting.count(deferred) >= n }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	settled := counting.count(deferred)
	require.LessOrEqual(t, settled, 2*n)
	time.Sleep(time.Second)
	require.Equal(t, settled, counting.count(deferred), "the deferred queue must not cycle messages that are not due")
	require.Zero(t, counting.count(workQueue))
	require.Zero(t, b.calls.count(), "no handler calls")
}

func TestEarlierMessageLowersTheNextProcessingTime(t *testing.T) {
	t.Parallel()
	transports(t, testLowering)
}

func testLowering(t *testing.T, ps pubSub) {
	b := start(t, ps, baseConfig(ps), nil)

	late := waiting("late", time.Now().Add(time.Hour))
	require.NoError(t, ps.Publish(workQueue, late))
	time.Sleep(300 * time.Millisecond) // the processor now waits for the hour, holding "late"

	due := time.Now().Add(500 * time.Millisecond)
	early := waiting("early", due)
	require.NoError(t, ps.Publish(workQueue, early))
	c := b.calls.waitCalls(t, early.UUID, 1, 5*time.Second)[0]
	require.False(t, c.at.Before(due), "handled %s early", due.Sub(c.at))
	require.Empty(t, b.calls.of(late.UUID))
}

func TestWithoutDeferredQueueMessagesThrashThroughTheWorkQueue(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	counting := &countingPublisher{Publisher: ps}
	cfg := baseConfig(ps)
	cfg.DeferredQueue, cfg.Subscriber = "", nil // nothing to consume without a deferred queue
	cfg.Publisher = counting
	cfg.DurationToIgnoreOnFailure = []time.Duration{300 * time.Millisecond}
	b := start(t, ps, cfg, func(n int, _ *message.Message) error {
		if n == 1 {
			return errRefused
		}
		return nil
	})
	require.Empty(t, b.retries.DeferredQueue())
	require.NotContains(t, b.router.Handlers(), wire.DeferredQueue("orders", "test-1"))

	msg := message.NewMessage(watermill.NewUUID(), []byte("thrash"))
	require.NoError(t, ps.Publish(workQueue, msg))
	calls := b.calls.waitCalls(t, msg.UUID, 2, 10*time.Second)
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 300*time.Millisecond)
	require.Greater(t, counting.count(workQueue), 2, "the waiting message went round the work queue")
	t.Logf("the waiting message went round the work queue %d times in %s", counting.count(workQueue), calls[1].at.Sub(calls[0].at))
}

func TestMiddlewarePassesOtherTopicsThrough(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	errs := subscribe(t, ps, wire.DefaultErrorQueue)
	retries, err := recoverability.New(baseConfig(ps), watermill.NopLogger{})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(retries.Middleware) // the mistake: router-wide
	require.NoError(t, retries.AddToRouter(router))

	calls := &callLog{}
	router.AddConsumerHandler("payments", "payments", ps, func(msg *message.Message) error {
		if calls.record(msg) == 1 {
			return errRefused // nacked and redelivered by GoChannel, as without the middleware
		}
		return nil
	})
	runRouter(t, router)

	msg := message.NewMessage(watermill.NewUUID(), nil)
	require.NoError(t, ps.Publish("payments", msg))
	got := calls.waitCalls(t, msg.UUID, 2, 5*time.Second)
	require.Empty(t, got[1].metadata.Get(wire.HeaderRetryIgnoreUntil), "no retry schedule for another topic")
	requireNothing(t, errs, 300*time.Millisecond)
}

func TestMiddlewareWithoutAddToRouterSaysSo(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	retries, err := recoverability.New(baseConfig(ps), watermill.NopLogger{})
	require.NoError(t, err)
	handler := retries.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	_, err = handler(waiting("x", time.Now().Add(time.Hour)))
	require.ErrorIs(t, err, recoverability.ErrNotAddedToRouter)
}

func TestOneDeferredQueuePerRouter(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	for i, want := range []error{nil, recoverability.ErrDeferredQueueInUse} {
		cfg := baseConfig(ps)
		cfg.WorkQueue = fmt.Sprintf("work-%d", i)
		retries, err := recoverability.New(cfg, watermill.NopLogger{})
		require.NoError(t, err)
		err = retries.AddToRouter(router)
		if want == nil {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, want, "two handlers may not share one deferred queue")
		}
	}
}

// A long wait is broken into passes MaxDeferredHold apart, so no delivery stays unacked longer
// than a broker allows; that is a pass now and then, not a loop.
func TestMaxDeferredHoldBoundsHowLongAMessageIsHeld(t *testing.T) {
	t.Parallel()
	ps := newDurableQueues()
	counting := &countingPublisher{Publisher: ps}
	cfg := baseConfig(ps)
	cfg.Publisher = counting
	cfg.MaxDeferredHold = 300 * time.Millisecond
	b := start(t, ps, cfg, nil)

	msg := waiting("in an hour", time.Now().Add(time.Hour))
	require.NoError(t, ps.Publish(workQueue, msg))
	time.Sleep(2 * time.Second)
	putBack := counting.count(b.retries.DeferredQueue()) - 1 // less the move from the work queue
	require.GreaterOrEqual(t, putBack, 2, "passes were made while the message waited")
	require.Less(t, putBack, 20, "about one pass per MaxDeferredHold, not a spin")
	require.Empty(t, b.calls.of(msg.UUID))
	t.Logf("%d passes in 2 s with MaxDeferredHold 300ms", putBack)
}
