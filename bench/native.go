package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// nativePrefix names the benchmark's delay levels, apart from any an application uses.
const nativePrefix = "timeoutbench"

// nativeRabbitMQ is RabbitMQ's native delay: 28 levels of TTL queues dead-lettering into each
// other (native/rabbitmq), with its default quorum queues.
func nativeRabbitMQ() System {
	return System{
		Name:  "RabbitMQ native (28 levels)",
		Needs: []string{"rabbitmq"},
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			closers := cleanup{func() error { return deleteQueues(env.AMQPURL, dest) }}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			pub, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: env.AMQPURL, Prefix: nativePrefix, ConnectionName: "timeoutbench native"}, env.logger())
			if err != nil {
				return fail(fmt.Errorf("connecting the native publisher: %w", err))
			}
			closers = append(closers, pub.Close)
			if err := pub.Setup(ctx); err != nil {
				return fail(fmt.Errorf("declaring the delay levels: %w", err))
			}
			if err := pub.EnsureDestinations(ctx, dest); err != nil {
				return fail(fmt.Errorf("binding the destination: %w", err))
			}
			arrivals, closeReceiver, err := receiver(ctx, env.AMQPURL, dest)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, closeReceiver)
			return &Rig{
				Mark:     timeouts.DeliverAt,
				Publish:  pub.Publish,
				Arrivals: arrivals,
				Close:    closers.run,
				Notes:    []string{fmt.Sprintf("%s level queues, delays in whole seconds rounded up", pub.Topology().QueueType())},
			}, nil
		},
	}
}
