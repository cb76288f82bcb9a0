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
//
// A backlog message published s seconds (rounded up) before its due time waits in one level
// queue per set bit of s, so it is dead-lettered popcount(s) times (1 to 4 for the 2 to 16 s
// this backlog's messages wait, depending on how fast the pilot published; the "2 hops"
// dead-letter ceiling is the raw path of two), the last time at the due time or up to a second
// after it (whole seconds, rounded up). Each
// dead-lettering from level L is routed through the topic exchanges of levels L−1 … 0 and the
// delivery exchange on a 29-word routing key, where the raw path uses the default exchange: on
// RabbitMQ 3.10 that routing, done by each quorum queue's dead-letter worker, is most of the
// broker's work in the drain.
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
				Notes: []string{fmt.Sprintf("%s level queues, delays in whole seconds rounded up", rabbitmq.Quorum), // the Config's default QueueType
					"each message is dead-lettered once per set bit of its delay in seconds (1–4 here; see the 2-hop ceiling), each time routed through topic exchanges"},
			}, nil
		},
	}
}
