package acceptance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// retryingRouter is one instance of a service whose handler on cfg.WorkQueue has cfg's retries.
type retryingRouter struct {
	router  *message.Router
	stopped chan struct{}
	runErr  error
}

// startRetryingRouter runs a router with handle on cfg.WorkQueue and cfg's retries. It returns
// the router running, or the error Run returned at start.
func startRetryingRouter(t *testing.T, cfg recoverability.Config, handle func(*message.Message) error) (*retryingRouter, error) {
	t.Helper()
	retries, err := recoverability.New(cfg, testLogger())
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, testLogger())
	require.NoError(t, err)
	router.AddConsumerHandler("work", cfg.WorkQueue, cfg.Subscriber, handle).AddMiddleware(retries.Middleware)
	require.NoError(t, retries.AddToRouter(router))

	r := &retryingRouter{router: router, stopped: make(chan struct{})}
	go func() {
		defer close(r.stopped)
		r.runErr = router.Run(context.Background())
	}()
	select {
	case <-router.Running():
		t.Cleanup(r.stop)
		return r, nil
	case <-r.stopped:
		return nil, r.runErr
	case <-time.After(time.Minute):
		t.Fatal("the router neither ran nor failed within a minute")
		return nil, nil
	}
}

func (r *retryingRouter) stop() {
	_ = r.router.Close()
	<-r.stopped
}

// requireRefusedAsShared checks the error of an instance started on a deferred queue that another
// instance consumes.
func requireRefusedAsShared(t *testing.T, err error, deferredQueue string) {
	t.Helper()
	require.Error(t, err, "a second instance on deferred queue %s started", deferredQueue)
	require.ErrorIs(t, err, recoverability.ErrDeferredQueueInUse)
	require.ErrorContains(t, err, deferredQueue)
	t.Logf("refused: %v", err)
}

// failingOnce fails a message's first call and records every call.
func failingOnce(calls *callLog, handled chan<- *message.Message) func(*message.Message) error {
	return func(msg *message.Message) error {
		if calls.add() == 1 {
			return errors.New("payment provider unavailable")
		}
		handled <- msg
		return nil
	}
}

// TestASecondInstanceOnTheSameDeferredQueueIsRefusedOnRabbitMQ: a deferred queue is never shared.
// A second instance configured with the first's deferred queue is refused at start, naming the
// queue, and the first goes on retrying; once the first has stopped, an instance may take the
// queue over.
func TestASecondInstanceOnTheSameDeferredQueueIsRefusedOnRabbitMQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "deferred-shared")
	work, deferred := e.queue("work"), e.queue("deferred")
	config := func(role string) recoverability.Config {
		pub, sub, err := amqptransport.New(e.config(role), testLogger())
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
		return recoverability.Config{
			WorkQueue: work, DeferredQueue: deferred, ErrorQueue: e.errorQueue,
			DurationToIgnoreOnFailure: []time.Duration{time.Second},
			Publisher:                 pub, Subscriber: sub,
		}
	}
	calls := &callLog{}
	handled := make(chan *message.Message, 1)
	first, err := startRetryingRouter(t, config("first"), failingOnce(calls, handled))
	require.NoError(t, err)

	_, err = startRetryingRouter(t, config("second"), func(*message.Message) error { return nil })
	requireRefusedAsShared(t, err, deferred)

	producer, err := amqptransport.NewPublisher(e.config("producer"), testLogger())
	require.NoError(t, err)
	defer producer.Close()
	msg := message.NewMessage(watermill.NewUUID(), []byte("order 44"))
	require.NoError(t, producer.Publish(work, msg))
	select {
	case got := <-handled:
		require.Equal(t, msg.UUID, got.UUID)
	case <-time.After(time.Minute):
		t.Fatal("the first instance's delayed retry never came")
	}
	c := calls.snapshot()
	require.Len(t, c, 2)
	require.GreaterOrEqual(t, c[1].Sub(c[0]), time.Second)

	first.stop()
	_, err = startRetryingRouter(t, config("third"), func(*message.Message) error { return nil })
	require.NoError(t, err, "the deferred queue is free once its instance has stopped")
}

// TestMaximumFailureCountOnRabbitMQ: with MaximumFailureCount 4 and [0.5 s, 1 s], a handler that
// always fails is called 4 times, the last two retries 1 s apart, and the message then waits on the
// error queue with its counts.
func TestMaximumFailureCountOnRabbitMQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "max-failures")
	work := e.queue("work")
	pub, sub, err := amqptransport.New(e.config("service"), testLogger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
	calls := &callLog{}
	_, err = startRetryingRouter(t, recoverability.Config{
		WorkQueue: work, DeferredQueue: e.queue("deferred"), ErrorQueue: e.errorQueue,
		DurationToIgnoreOnFailure: []time.Duration{500 * time.Millisecond, time.Second},
		MaximumFailureCount:       4,
		Publisher:                 pub, Subscriber: sub,
	}, func(*message.Message) error {
		calls.add()
		return errors.New("card declined")
	})
	require.NoError(t, err)
	errs := receive(t, e, e.errorQueue)

	msg := message.NewMessage(watermill.NewUUID(), []byte("order 45"))
	require.NoError(t, pub.Publish(work, msg))
	got := await(t, errs, 2*time.Minute)
	require.Equal(t, msg.UUID, got.msg.UUID)
	require.Equal(t, "4", got.msg.Metadata.Get(wire.HeaderFailureAttempts))
	require.Equal(t, "3", got.msg.Metadata.Get(wire.HeaderFailureDelayedRetries))
	c := calls.snapshot()
	require.Len(t, c, 4, "retried while failures < MaximumFailureCount")
	for i, wait := range []time.Duration{500 * time.Millisecond, time.Second, time.Second} {
		require.GreaterOrEqual(t, c[i+1].Sub(c[i]), wait, "retry %d came before its wait was over", i+1)
	}
}

// Shuttle's "Deferred Messages" page configures a deferred queue so, verbatim.
const shuttleWithDeferredQueue = `{
  "Shuttle": {
    "ServiceBus": {
      "Inbox": {
        "WorkQueueUri": "queue://configuration/server-inbox-work",
        "DeferredQueueUri": "queue://configuration/server-inbox-deferred",
        "ErrorQueueUri": "queue://configuration/error"
      }
    }
  }
}`

// TestShuttlesDeferredQueueConfigurationOnSQL: Shuttle's configuration with a deferred queue,
// verbatim, runs on the SQL transport (each test on a database of its own, so its fixed queue
// names are the test's): a failed message comes back after the default schedule's 10 s through
// server-inbox-deferred. A second instance with the same file is refused at start, naming the
// queue; once the first has stopped, it may start.
func TestShuttlesDeferredQueueConfigurationOnSQL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "appsettings.json")
	require.NoError(t, os.WriteFile(path, []byte(shuttleWithDeferredQueue), 0o600))
	for _, b := range []sqlBackend{{name: "postgres", dialect: sqltransport.PostgreSQL}, {name: "mariadb", dialect: sqltransport.MySQL}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := newSQLEnv(t, b, "shuttle-deferred")
			config := func() recoverability.Config {
				var cfg recoverability.Config
				require.NoError(t, recoverability.LoadConfigFile(path, &cfg))
				pub, sub, err := sqltransport.New(context.Background(), e.config(), testLogger())
				require.NoError(t, err)
				t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
				cfg.Publisher, cfg.Subscriber = pub, sub
				return cfg
			}
			cfg := config()
			require.Equal(t, "server-inbox-deferred", cfg.DeferredQueue)
			calls := &callLog{}
			handled := make(chan *message.Message, 1)
			first, err := startRetryingRouter(t, cfg, failingOnce(calls, handled))
			require.NoError(t, err)

			_, err = startRetryingRouter(t, config(), func(*message.Message) error { return nil })
			requireRefusedAsShared(t, err, "server-inbox-deferred")

			msg := message.NewMessage(watermill.NewUUID(), []byte("order 46"))
			require.NoError(t, cfg.Publisher.Publish("server-inbox-work", msg))
			select {
			case got := <-handled:
				require.Equal(t, msg.UUID, got.UUID)
				require.Equal(t, "1", got.Metadata.Get(wire.HeaderRetryDelayedRetries))
			case <-time.After(time.Minute):
				t.Fatal("the delayed retry never came")
			}
			c := calls.snapshot()
			require.Len(t, c, 2)
			require.GreaterOrEqual(t, c[1].Sub(c[0]), 10*time.Second, "the default schedule's first wait is 10 s")

			first.stop()
			_, err = startRetryingRouter(t, config(), func(*message.Message) error { return nil })
			require.NoError(t, err, "the deferred queue is free once its instance has stopped")
		})
	}
}
