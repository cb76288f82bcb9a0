package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// Settings of the RabbitMQ scenarios.
const (
	// satelliteConsumers is amqptransport.Config.Consumers of the timeout manager's queues: the
	// satellites need no order, so they are handed up to this many messages at once, which they
	// batch; 256 is satellites.DefaultMaxBatch. It is a library user's documented setting; the
	// timeoutmill service runs connect.ServiceConsumers, which the note says beside the figure.
	satelliteConsumers = 256
	// receiverConsumers and receiverPrefetch make the destination's consumer (the application)
	// fast enough not to be what is measured: one channel with 256 messages handed out at once
	// carries the round trip and the dead-letter paths faster than 4 channels of one message at
	// a time each.
	receiverConsumers = 256
	receiverPrefetch  = 256
)

// receiver consumes a destination queue as a fast application would.
func receiver(ctx context.Context, url, dest string) (<-chan *message.Message, func() error, error) {
	sub, err := amqptransport.NewSubscriber(amqptransport.Config{
		URL: url, ConnectionName: "timeoutbench receiver", Consumers: receiverConsumers, PrefetchCount: receiverPrefetch,
	}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting the receiver: %w", err)
	}
	msgs, err := sub.Subscribe(ctx, dest)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("subscribing to %s: %w", dest, err), sub.Close())
	}
	return msgs, sub.Close, nil
}

// deleteQueues deletes queues on a connection of its own; missing ones are fine.
func deleteQueues(url string, queues ...string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connecting to delete queues: %w", err)
	}
	defer conn.Close()
	var errs []error
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("deleting queue %s: %w", q, err))
			continue
		}
		_ = ch.Close()
	}
	return errors.Join(errs...)
}

// rabbitMQPostgres is the emulated pipeline on RabbitMQ with the PostgreSQL store.
func rabbitMQPostgres() System {
	return System{
		Name:  "RabbitMQ + PostgreSQL",
		Needs: []string{"rabbitmq", "postgres"},
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			endpoint := endpointName()
			errorQueue := endpoint + ".error"
			queues := []string{wire.TimeoutsQueue(endpoint), wire.DispatcherQueue(endpoint), errorQueue, dest}
			schema, err := newSchema(ctx, env.PostgresDSN)
			if err != nil {
				return nil, err
			}
			closers := cleanup{schema.drop, func() error { return deleteQueues(env.AMQPURL, queues...) }}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			store, err := schema.store(ctx, env.PostgresDSN, endpoint)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, store.Close)
			pub, sub, err := amqptransport.New(amqptransport.Config{
				URL: env.AMQPURL, ConnectionName: "timeoutbench " + endpoint, Consumers: satelliteConsumers,
			}, env.logger())
			if err != nil {
				return fail(err)
			}
			closers = append(closers, pub.Close, sub.Close)
			if err := pub.DeclareEndpoint(ctx, endpoint, errorQueue); err != nil {
				return fail(err)
			}
			if err := pub.DeclareQueues(ctx, dest); err != nil {
				return fail(err)
			}
			arrivals, closeReceiver, err := receiver(ctx, env.AMQPURL, dest)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, closeReceiver)
			p, err := startPipeline(ctx, env, timeouts.Config{
				Endpoint: endpoint, Store: store, Publisher: pub, Subscriber: sub, ErrorQueue: errorQueue,
			})
			if err != nil {
				return fail(err)
			}
			closers = append(closers, p.close)
			return &Rig{
				Mark:     timeouts.DeliverAt,
				Publish:  p.manager.Publisher().Publish,
				Arrivals: arrivals,
				Pending:  pendingOf(store),
				Close:    closers.run,
				Notes: []string{fmt.Sprintf("%d consumers per satellite queue (amqptransport.Config.Consumers; the timeoutmill service runs %d)",
					satelliteConsumers, connect.ServiceConsumers)},
			}, nil
		},
	}
}
