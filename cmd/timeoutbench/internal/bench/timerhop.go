package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The one-hop yardsticks: a message held by a timer in this process and published to its
// destination when due, through one hop of the broker. It is the floor of any delay mechanism
// that delivers through that broker: no store, no claim, no second hop. Each broker row's
// precision reads against its own.
const (
	timerHopRabbitMQ = "yardstick: RabbitMQ, one hop from an in-process timer"
	timerHopSQL      = "yardstick: SQL transport, one hop from an in-process timer"
	timerHopRedis    = "yardstick: Redis Streams, one hop from an in-process timer"
	timerHopNATS     = "yardstick: NATS JetStream, one hop from an in-process timer"
)

// timerHopSystems are the one-hop yardsticks, run through the precision workload only.
func timerHopSystems() []System {
	return []System{
		{
			Name: timerHopRabbitMQ, Needs: []string{"rabbitmq"}, Reference: true, Kinds: []Kind{KindPrecision},
			Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
				closers := cleanup{func() error { return deleteQueues(env.AMQPURL, dest) }}
				pub, err := amqptransport.NewPublisher(amqptransport.Config{URL: env.AMQPURL, ConnectionName: "timeoutbench timer hop"}, env.logger())
				if err != nil {
					return nil, errors.Join(err, closers.run())
				}
				closers = append(closers, pub.Close)
				arrivals, closeReceiver, err := receiver(ctx, env.AMQPURL, dest)
				if err != nil {
					return nil, errors.Join(err, closers.run())
				}
				closers = append(closers, closeReceiver)
				return timerHopRig(pub, arrivals, closers, "persistent messages published with confirms when due, to a durable queue; the emulated rows' receiver"), nil
			},
		},
		{
			Name: timerHopSQL, Needs: []string{"postgres"}, Reference: true, Kinds: []Kind{KindPrecision},
			Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
				schema, err := newSchema(ctx, env.PostgresDSN)
				if err != nil {
					return nil, err
				}
				closers := cleanup{schema.drop}
				fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
				cfg := sqltransport.Config{Dialect: sqltransport.PostgreSQL, DSN: env.PostgresDSN, Schema: schema.name, Consumers: sqlReceiverConsumers, BatchSize: sqlBatchSize}
				pub, sub, err := sqltransport.New(ctx, cfg, env.logger())
				if err != nil {
					return fail(err)
				}
				closers = append(closers, pub.Close, sub.Close)
				if err := pub.DeclareQueues(ctx, dest); err != nil {
					return fail(err)
				}
				arrivals, err := sub.Subscribe(ctx, dest)
				if err != nil {
					return fail(err)
				}
				return timerHopRig(pub, arrivals, closers, fmt.Sprintf("published when due into the destination's table; %d consumers woken by the publisher, as the SQL transport row's receiver", sqlReceiverConsumers)), nil
			},
		},
	}
}

// streamTimerHops are the one-hop yardsticks of the stream brokers, run after their emulated
// rows.
func streamTimerHops() []System {
	return []System{streamTimerHop(redisBroker(), timerHopRedis), streamTimerHop(natsBroker(), timerHopNATS)}
}

// streamTimerHop publishes each message when due through b's transport, to the receiver the
// emulated row on b uses: the broker's subscriber with the service's consumers per queue.
func streamTimerHop(b streamBroker, name string) System {
	return System{
		Name: name, Needs: []string{b.need}, Reference: true, Kinds: []Kind{KindPrecision},
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			closers := cleanup{func() error { return b.forget(context.Background(), env, dest) }}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			// Each open connects a publisher and a subscriber: the first's publisher publishes, the
			// second's subscriber receives, as in the emulated row.
			pub, unusedSub, _, err := b.open(ctx, env)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, pub.Close, unusedSub.Close)
			unusedPub, receiver, _, err := b.open(ctx, env)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, unusedPub.Close, receiver.Close)
			arrivals, err := receiver.Subscribe(ctx, dest)
			if err != nil {
				return fail(fmt.Errorf("subscribing to %s: %w", dest, err))
			}
			return timerHopRig(pub, arrivals, closers, fmt.Sprintf("published when due, each publish waiting for the broker's reply; the emulated row's receiver (%d consumers)", streamConsumers)), nil
		},
	}
}

// timerHopRig holds each message until its wire.HeaderExpire, then publishes it with pub. A
// publish that fails leaves the message to be counted lost.
func timerHopRig(pub message.Publisher, arrivals <-chan *message.Message, closers cleanup, note string) *Rig {
	var timers sync.WaitGroup
	stop := make(chan struct{})
	var once sync.Once
	return &Rig{
		Mark: timeouts.DeliverAt,
		Publish: func(topic string, msgs ...*message.Message) error {
			for _, msg := range msgs {
				due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(wire.HeaderExpire))
				if err != nil {
					return fmt.Errorf("reading the due time: %w", err)
				}
				timers.Add(1)
				time.AfterFunc(time.Until(due), func() {
					defer timers.Done()
					select {
					case <-stop:
					default:
						_ = pub.Publish(topic, msg)
					}
				})
			}
			return nil
		},
		Arrivals: arrivals,
		Close: func() error {
			once.Do(func() { close(stop) })
			timers.Wait()
			return closers.run()
		},
		Notes: []string{note},
	}
}
