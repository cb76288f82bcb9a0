package acceptance

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/stopcycles"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// Not parallel: it measures lateness, and runs alone in its package before the parallel tests.
// The manager and the destination's handler share one router and one subscriber, as in the
// GoChannel quick start.
func TestGracefulStopsOnRabbitMQAndPostgreSQLLoseNothing(t *testing.T) {
	e := newEnv(t, "stops")
	dsn, schema := testenv.PostgresSchema(t)
	dest := e.queue("dest")
	stopcycles.Run(t, stopcycles.Config{
		Destination: dest,
		// RabbitMQ and PostgreSQL under the race detector drain slower than GoChannel: a longer
		// cycle keeps the load below the drain rate, so lateness measures the stops.
		CycleLength: 2 * time.Second,
		Start: func(t *testing.T, cycle int, rec *stopcycles.Recorder) stopcycles.Process {
			logger := testLogger()
			store, err := postgres.Open(context.Background(), postgres.Config{DSN: dsn, Schema: schema, Endpoint: e.endpoint})
			require.NoError(t, err)
			pub, sub, err := amqptransport.New(e.config("stops"), logger)
			require.NoError(t, err)
			require.NoError(t, pub.DeclareEndpoint(context.Background(), e.endpoint, e.errorQueue))
			manager, err := timeouts.NewManager(rec.Configure(timeouts.Config{
				Endpoint:   e.endpoint,
				Store:      store,
				Publisher:  pub,
				Subscriber: sub,
				ErrorQueue: e.errorQueue,
			}), logger)
			require.NoError(t, err)
			router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 15 * time.Second}, logger)
			require.NoError(t, err)
			require.NoError(t, manager.AddToRouter(router))
			router.AddConsumerHandler("destination", dest, sub, func(msg *message.Message) error {
				rec.Delivered(msg)
				return nil
			})
			router.AddConsumerHandler("error-queue", e.errorQueue, sub, func(msg *message.Message) error {
				rec.ErrorQueue(msg)
				return nil
			})
			return stopcycles.RunRouter(manager, router, store.Close, sub.Close, pub.Close)
		},
	})
}
