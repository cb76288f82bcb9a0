package bench

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// nativePrefix starts the names of the benchmark's delay levels, apart from any an application
// uses.
const nativePrefix = "timeoutbench"

// nativeTopology opens a topology of the delay levels for one rig: a prefix of its own, and a
// closer that deletes its queues and exchanges. Levels shared across runs would carry what one
// run left in them into the next: a message of a destination bound without the guard (as before
// it existed) is held in its level when its queue is gone, and 32 of those stop the level for
// every destination (`timeoutmill native verify` names it), which counted half of a later run's
// messages as lost.
func nativeTopology(url string) (prefix string, remove func() error) {
	prefix = nativePrefix + "-" + strings.ToLower(watermill.NewShortUUID()[:10])
	return prefix, func() error { return deleteNativeTopology(url, prefix) }
}

// deleteNativeTopology deletes the queues and exchanges of the delay levels named with prefix.
func deleteNativeTopology(url, prefix string) error {
	t, err := nativedelay.NewTopology(prefix, nativedelay.Quorum)
	if err != nil {
		return err
	}
	queues := []string{t.UnroutableQueue(), t.ProbeQueue()}
	exchanges := []string{t.DeliveryExchange(), t.DestinationsExchange(), t.UnroutableExchange()}
	for level := range nativedelay.Levels {
		queues = append(queues, t.Queue(level))
		exchanges = append(exchanges, t.Exchange(level))
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connecting to delete the delay levels: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("deleting queue %s: %w", q, err)
		}
	}
	for _, x := range exchanges {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("deleting exchange %s: %w", x, err)
		}
	}
	return nil
}

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
			prefix, removeTopology := nativeTopology(env.AMQPURL)
			closers := cleanup{removeTopology, func() error { return deleteQueues(env.AMQPURL, dest) }}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			pub, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: env.AMQPURL, Prefix: prefix, ConnectionName: "timeoutbench native"}, env.logger())
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

// nativePlainName names the native ceiling's row.
const nativePlainName = "RabbitMQ native, plain amqp091 client (28 levels)"

// nativePlain is the native ceiling of the project's own making: the same 28-level topology and
// the same delays as nativeRabbitMQ, published by a plain amqp091 client (the routing key built
// by hand, one channel with confirms per call, no marshaling beyond copying the headers), so
// that the native row reads as the project's overhead on the mechanism. It is a yardstick, not
// timeoutmill: the targets leave it out of timeoutmill's own.
func nativePlain() System {
	return System{
		Name:      nativePlainName,
		Needs:     []string{"rabbitmq"},
		Reference: true,
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			prefix, removeTopology := nativeTopology(env.AMQPURL)
			closers := cleanup{removeTopology, func() error { return deleteQueues(env.AMQPURL, dest) }}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			// The topology is declared with the project's tool; only the publishing is plain.
			setup, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: env.AMQPURL, Prefix: prefix, ConnectionName: "timeoutbench native setup"}, env.logger())
			if err != nil {
				return fail(fmt.Errorf("connecting the native set-up: %w", err))
			}
			err = setup.Setup(ctx)
			if err == nil {
				err = setup.EnsureDestinations(ctx, dest)
			}
			if err := errors.Join(err, setup.Close()); err != nil {
				return fail(fmt.Errorf("declaring the delay levels: %w", err))
			}
			conn, err := amqp.Dial(env.AMQPURL)
			if err != nil {
				return fail(fmt.Errorf("connecting the plain client: %w", err))
			}
			closers = append(closers, conn.Close)
			arrivals, closeReceiver, err := receiver(ctx, env.AMQPURL, dest)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, closeReceiver)
			return &Rig{
				Mark: timeouts.DeliverAt,
				Publish: func(topic string, msgs ...*message.Message) error {
					return plainNativePublish(ctx, conn, prefix, topic, msgs)
				},
				Arrivals: arrivals,
				Close:    closers.run,
				Notes:    []string{"the native row's topology and delays, published with amqp091 alone: persistent, confirms, a channel per call"},
			}, nil
		},
	}
}

// plainNativePublish publishes msgs into the delay levels for topic, each delayed until its
// wire.HeaderExpire rounded up to whole seconds, as NServiceBus.RabbitMQ v2 routes them: to the
// exchange of the delay's highest set bit, with a routing key of its 28 bits and the topic.
func plainNativePublish(ctx context.Context, conn *amqp.Connection, prefix, topic string, msgs []*message.Message) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	now := time.Now()
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, msg := range msgs {
		due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(wire.HeaderExpire))
		if err != nil {
			return fmt.Errorf("message %s: %w", msg.UUID, err)
		}
		var seconds uint32
		if d := due.Sub(now); d > 0 {
			seconds = uint32((d + time.Second - 1) / time.Second)
		}
		var key strings.Builder
		for bit := 27; bit >= 0; bit-- {
			key.WriteByte('0' + byte(seconds>>bit&1))
			key.WriteByte('.')
		}
		key.WriteString(topic)
		exchange := prefix + ".delay-delivery"
		if seconds > 0 {
			exchange = fmt.Sprintf("%s.delay-level-%02d", prefix, bits.Len32(seconds)-1)
		}
		headers := amqp.Table{"_watermill_message_uuid": msg.UUID}
		for k, v := range msg.Metadata {
			if k != wire.HeaderExpire {
				headers[k] = v
			}
		}
		p := amqp.Publishing{MessageId: msg.UUID, Headers: headers, Body: msg.Payload, DeliveryMode: amqp.Persistent}
		if confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key.String(), false, false, p); err != nil {
			return err
		}
	}
	for _, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("message not confirmed")
		}
	}
	return nil
}
