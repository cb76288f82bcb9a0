package timeouts_test

import (
	"context"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/stopcycles"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// startGoChannelProcess is the quick start's set-up: one GoChannel carries the manager's queues
// and the destination, whose handler shares the manager's router.
func startGoChannelProcess(t *testing.T, store persistence.Store, closeDB bool, rec *stopcycles.Recorder) stopcycles.Process {
	t.Helper()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	manager, err := timeouts.NewManager(rec.Configure(timeouts.Config{
		Endpoint:   endpoint,
		Store:      store,
		Publisher:  pubSub,
		Subscriber: pubSub,
	}), logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))
	router.AddConsumerHandler("destination", stopcycles.Destination, pubSub, func(msg *message.Message) error {
		rec.Delivered(msg)
		return nil
	})
	router.AddConsumerHandler("error-queue", wire.DefaultErrorQueue, pubSub, func(msg *message.Message) error {
		rec.ErrorQueue(msg)
		return nil
	})
	closers := []func() error{pubSub.Close}
	if closeDB {
		closers = []func() error{store.Close, pubSub.Close}
	}
	return stopcycles.RunRouter(manager, router, closers...)
}

// Not parallel: it measures lateness, and runs alone in its package before the parallel tests.
func TestGracefulStopsOnGoChannelAndMemoryLoseNothing(t *testing.T) {
	store := memory.New().(memStore) // outlives each process, as a database would
	stopcycles.Run(t, stopcycles.Config{
		Start: func(t *testing.T, _ int, rec *stopcycles.Recorder) stopcycles.Process {
			return startGoChannelProcess(t, store, false, rec)
		},
	})
}

// Not parallel: it measures lateness, and runs alone in its package before the parallel tests.
func TestGracefulStopsOnGoChannelAndSQLiteLoseNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeouts.db")
	stopcycles.Run(t, stopcycles.Config{
		Start: func(t *testing.T, _ int, rec *stopcycles.Recorder) stopcycles.Process {
			store, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Endpoint: endpoint})
			require.NoError(t, err)
			return startGoChannelProcess(t, store, true, rec)
		},
	})
}

func TestGoChannelThatDoesNotWaitForAcksIsRefused(t *testing.T) {
	t.Parallel()
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer pubSub.Close()
	_, err := timeouts.NewManager(timeouts.Config{Endpoint: endpoint, Store: memory.New(), Publisher: pubSub, Subscriber: pubSub}, nil)
	require.ErrorIs(t, err, timeouts.ErrInvalidConfig)
	require.ErrorContains(t, err, "BlockPublishUntilSubscriberAck")
}

func TestDelayedPublishCutShortByAClosingGoChannelIsAnError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		_, err := pubSub.Subscribe(context.Background(), wire.TimeoutsQueue(endpoint)) // never acks
		require.NoError(t, err)
		pub, err := timeouts.NewPublisher(pubSub, endpoint)
		require.NoError(t, err)

		msg := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(msg, time.Minute)
		published := make(chan error, 1)
		go func() { published <- pub.Publish("dest", msg) }()
		synctest.Wait() // the Publish waits for the ack
		require.NoError(t, pubSub.Close())
		require.ErrorIs(t, <-published, timeouts.ErrUnconfirmed, "not a silent success")
	})
}

func TestTheDocumentedMinimalConfigValidates(t *testing.T) {
	t.Parallel()
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubSub.Close()
	cfg := timeouts.Config{Endpoint: "orders", Store: memory.New(), Publisher: pubSub, Subscriber: pubSub}
	require.NoError(t, cfg.Validate(), "every other setting has a default")
	_, err := timeouts.NewManager(cfg, nil)
	require.NoError(t, err)
}

func TestAStoreNeverOpenedIsRefused(t *testing.T) {
	t.Parallel()
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubSub.Close()
	var typedNil *sqlite.Store
	for name, store := range map[string]persistence.Store{"typed nil": typedNil, "zero value": &sqlite.Store{}} {
		_, err := timeouts.NewManager(timeouts.Config{Endpoint: "orders", Store: store, Publisher: pubSub, Subscriber: pubSub}, nil)
		require.ErrorIs(t, err, timeouts.ErrInvalidConfig, name)
		require.ErrorContains(t, err, "Store is a nil or zero-value", name)
	}
}

// TestRouterClosedWhileTheStoreIsBeingSetUpStops: a router closed while the manager still retries
// setting up an unreachable store stops the manager; it never became ready, and reports no error.
func TestRouterClosedWhileTheStoreIsBeingSetUpStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &unreadyStore{inner: memory.New()}
		b := setup(t, store, func(c *timeouts.Config) { c.RetryDelay = 10 * time.Millisecond })
		time.Sleep(time.Second) // fake time: the set-up is retried meanwhile
		require.GreaterOrEqual(t, store.attempts.Load(), int32(3), "the manager keeps trying to set the store up")

		require.NoError(t, b.router.Close())
		<-b.manager.Done() // synctest reports a deadlock if it never closes
		select {
		case <-b.manager.Ready():
			t.Fatal("ready without a store set up")
		default:
		}
		require.NoError(t, b.manager.Err())
		require.Zero(t, b.manager.Activity().Dispatched)
	})
}

// TestGoChannelClosedByItsOwnerStopsTheManager: the manager watches its GoChannel through the
// API: when the GoChannel closes under a running router, the stop begins and Done closes.
func TestGoChannelClosedByItsOwnerStopsTheManager(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		<-b.manager.Ready()
		require.NoError(t, b.pubSub.Close())
		<-b.manager.Done()
		require.NoError(t, b.manager.Err())
	})
}
