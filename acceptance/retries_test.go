package acceptance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// callLog records when the handler was called, across restarts.
type callLog struct {
	mu    sync.Mutex
	calls []time.Time
}

func (c *callLog) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, time.Now())
	return len(c.calls)
}

func (c *callLog) snapshot() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.calls...)
}

// runRetryingService is one run of a service whose handler on work uses delayed retries through
// this instance's deferred queue on RabbitMQ. It returns a stop function.
func runRetryingService(t *testing.T, e *env, work, instance string, schedule []time.Duration, handle func(*message.Message) error) (stop func()) {
	t.Helper()
	pub, sub, err := amqptransport.New(e.config("retries "+instance), testLogger())
	require.NoError(t, err)
	retries, err := recoverability.New(recoverability.Config{
		WorkQueue:                 work,
		DeferredQueue:             e.queue("Deferred." + instance), // deleted at cleanup with the others
		ErrorQueue:                e.errorQueue,
		DurationToIgnoreOnFailure: schedule,
		Publisher:                 pub,
		Subscriber:                sub,
	}, testLogger())
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, testLogger())
	require.NoError(t, err)
	router.AddConsumerHandler("work", work, sub, handle).AddMiddleware(retries.Middleware)
	require.NoError(t, retries.AddToRouter(router))

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = router.Run(context.Background())
	}()
	<-router.Running()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = router.Close()
			<-stopped
			_ = pub.Close()
			_ = sub.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestDelayedRetriesSurviveAServiceRestartOnRabbitMQ: a handler fails twice, then succeeds, on a
// schedule of [2 s, 2 s]. The service is stopped while the message waits for its first retry in
// the instance's deferred queue and started again: the retries go on, at their times, and the
// message is handled exactly once successfully.
func TestDelayedRetriesSurviveAServiceRestartOnRabbitMQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "retries")
	work := e.queue("work")
	instance := "instance-1"
	schedule := []time.Duration{2 * time.Second, 2 * time.Second}
	calls := &callLog{}
	succeeded := make(chan *message.Message, 1)
	handle := func(msg *message.Message) error {
		if calls.add() < 3 {
			return errors.New("payment provider unavailable")
		}
		succeeded <- msg
		return nil
	}

	stop := runRetryingService(t, e, work, instance, schedule, handle)
	producer, err := amqptransport.NewPublisher(e.config("producer"), testLogger())
	require.NoError(t, err)
	defer producer.Close()
	msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 42"))
	msg.Metadata.Set("trace", "ü-1")
	require.NoError(t, producer.Publish(work, msg))

	require.Eventually(t, func() bool { return len(calls.snapshot()) == 1 }, time.Minute, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // the failed message is on its way to the deferred queue
	stop()
	stoppedAt := time.Now()

	runRetryingService(t, e, work, instance, schedule, handle)
	var got *message.Message
	select {
	case got = <-succeeded:
	case <-time.After(2 * time.Minute):
		t.Fatalf("not handled after the restart; calls so far: %d", len(calls.snapshot()))
	}

	c := calls.snapshot()
	require.Len(t, c, 3, "failed twice, then succeeded")
	require.GreaterOrEqual(t, c[1].Sub(c[0]), schedule[0], "first delayed retry not before its time")
	require.GreaterOrEqual(t, c[2].Sub(c[1]), schedule[1], "second delayed retry not before its time")
	require.True(t, c[1].After(stoppedAt), "the retry came from the restarted service")
	require.Equal(t, msg.UUID, got.UUID)
	require.Equal(t, "charge order 42", string(got.Payload))
	require.Equal(t, "ü-1", got.Metadata.Get("trace"))
	require.Equal(t, "2", got.Metadata.Get(wire.HeaderRetryDelayedRetries))
	t.Logf("calls at +0, +%s, +%s (service restarted %s after the first failure)",
		c[1].Sub(c[0]).Round(time.Millisecond), c[2].Sub(c[0]).Round(time.Millisecond), stoppedAt.Sub(c[0]).Round(time.Millisecond))
}

// TestExhaustedRetriesEndOnTheErrorQueueOnRabbitMQ: a handler that always fails is called
// 1 + len(schedule) times, then the message is on the error queue with its failure headers.
func TestExhaustedRetriesEndOnTheErrorQueueOnRabbitMQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "retries-exhausted")
	work := e.queue("work")
	calls := &callLog{}
	runRetryingService(t, e, work, "instance-1", []time.Duration{500 * time.Millisecond, time.Second}, func(*message.Message) error {
		calls.add()
		return errors.New("card declined")
	})
	errs := receive(t, e, e.errorQueue)

	producer, err := amqptransport.NewPublisher(e.config("producer"), testLogger())
	require.NoError(t, err)
	defer producer.Close()
	msg := message.NewMessage(watermill.NewUUID(), []byte("order 43"))
	require.NoError(t, producer.Publish(work, msg))

	got := await(t, errs, 2*time.Minute)
	require.Equal(t, msg.UUID, got.msg.UUID)
	require.Equal(t, "order 43", string(got.msg.Payload))
	require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), "card declined")
	require.Equal(t, work, got.msg.Metadata.Get(wire.HeaderFailureQueue))
	require.Equal(t, "3", got.msg.Metadata.Get(wire.HeaderFailureAttempts))
	require.Len(t, calls.snapshot(), 3, "1 + len(DurationToIgnoreOnFailure) calls")
}
