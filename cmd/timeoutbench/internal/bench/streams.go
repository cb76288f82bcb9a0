package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/transport/redistransport"
)

// Names of the stream brokers' ceiling rows.
const (
	ceilingRedisRoundTrip = "Redis Streams round trip"
	ceilingNATSRoundTrip  = "NATS JetStream round trip"
)

// streamConsumers is the consumers per queue of the stream brokers' rows, for the satellites and
// the receiver alike: each is handed one message at a time, so a backlog needs several. It is
// the timeoutmill service's own setting.
const streamConsumers = connect.ServiceStreamConsumers

// streamBroker is Redis Streams or NATS JetStream through its transport package.
type streamBroker struct {
	name string
	need string
	// open connects a Publisher and a Subscriber; declare creates an endpoint's queues.
	open func(ctx context.Context, env Env) (message.Publisher, message.Subscriber, func(ctx context.Context, endpoint, errorQueue string) error, error)
	// forget deletes the streams whose names start with prefix.
	forget func(ctx context.Context, env Env, prefix string) error
}

func redisBroker() streamBroker {
	return streamBroker{
		name: "Redis Streams",
		need: "redis",
		open: func(ctx context.Context, env Env) (message.Publisher, message.Subscriber, func(context.Context, string, string) error, error) {
			pub, sub, err := redistransport.New(ctx, redistransport.Config{URL: env.RedisURL, Consumers: streamConsumers}, env.logger())
			if err != nil {
				return nil, nil, nil, err
			}
			return pub, sub, pub.DeclareEndpoint, nil
		},
		forget: func(ctx context.Context, env Env, prefix string) error {
			opts, err := redis.ParseURL(env.RedisURL)
			if err != nil {
				return err
			}
			c := redis.NewClient(opts)
			defer c.Close()
			keys, err := c.Keys(ctx, prefix+"*").Result()
			if err != nil || len(keys) == 0 {
				return err
			}
			return c.Del(ctx, keys...).Err()
		},
	}
}

func natsBroker() streamBroker {
	return streamBroker{
		name: "NATS JetStream",
		need: "nats",
		open: func(_ context.Context, env Env) (message.Publisher, message.Subscriber, func(context.Context, string, string) error, error) {
			pub, sub, err := natstransport.New(natstransport.Config{URL: env.NATSURL, Consumers: streamConsumers}, env.logger())
			if err != nil {
				return nil, nil, nil, err
			}
			return pub, sub, pub.DeclareEndpoint, nil
		},
		forget: func(_ context.Context, env Env, prefix string) error {
			conn, err := nats.Connect(env.NATSURL)
			if err != nil {
				return err
			}
			defer conn.Close()
			js, err := conn.JetStream()
			if err != nil {
				return err
			}
			var errs []error
			for name := range js.StreamNames() {
				if strings.HasPrefix(name, natstransport.StreamName(prefix)) {
					errs = append(errs, js.DeleteStream(name))
				}
			}
			return errors.Join(errs...)
		},
	}
}

// streamSystem is the emulated pipeline on a stream broker with the PostgreSQL store.
func streamSystem(b streamBroker) System {
	return System{
		Name:  b.name + " + PostgreSQL",
		Needs: []string{b.need, "postgres"},
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			p, err := openStreamPipeline(ctx, env, b, endpointName(), dest)
			if err != nil {
				return nil, err
			}
			return &p.Rig, nil
		},
	}
}

// streamPipeline is the emulated pipeline's rig on a stream broker, with the broker's publisher
// the timeout manager publishes through.
type streamPipeline struct {
	Rig
	next message.Publisher
}

// openStreamPipeline runs the timeout manager of endpoint on b with the PostgreSQL store,
// delivering to dest.
func openStreamPipeline(ctx context.Context, env Env, b streamBroker, endpoint, dest string) (*streamPipeline, error) {
	errorQueue := endpoint + ".error"
	schema, err := newSchema(ctx, env.PostgresDSN)
	if err != nil {
		return nil, err
	}
	closers := cleanup{schema.drop, func() error {
		return errors.Join(b.forget(context.Background(), env, endpoint), b.forget(context.Background(), env, dest))
	}}
	fail := func(err error) (*streamPipeline, error) { return nil, errors.Join(err, closers.run()) }
	store, err := schema.store(ctx, env.PostgresDSN, endpoint)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, store.Close)
	pub, sub, declare, err := b.open(ctx, env)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, pub.Close, sub.Close)
	if err := declare(ctx, endpoint, errorQueue); err != nil {
		return fail(err)
	}
	_, receiver, _, err := b.open(ctx, env)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, receiver.Close)
	arrivals, err := receiver.Subscribe(ctx, dest)
	if err != nil {
		return fail(err)
	}
	p, err := startPipeline(ctx, env, timeouts.Config{
		Endpoint: endpoint, Store: store, Publisher: pub, Subscriber: sub, ErrorQueue: errorQueue,
	})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, p.close)
	return &streamPipeline{
		Rig: Rig{
			Mark:     timeouts.DeliverAt,
			Publish:  p.manager.Publisher().Publish,
			Arrivals: arrivals,
			Pending:  pendingOf(store),
			Close:    closers.run,
			Notes:    []string{fmt.Sprintf("%d consumers per queue (the timeoutmill service's setting)", streamConsumers)},
		},
		next: pub,
	}, nil
}

// streamRoundTrip publishes messages through b's transport (8 goroutines, 100 messages a call)
// to a stream while a receiver with streamConsumers consumers takes them: one broker hop, the
// unit a delayed message pays three of in the emulated pipeline.
func streamRoundTrip(b streamBroker, name string) func(ctx context.Context, env Env, plan Plan) (Result, error) {
	return func(ctx context.Context, env Env, plan Plan) (Result, error) {
		n := plan.CeilingMessages
		queue := "timeoutbench_rt_" + watermill.NewShortUUID()
		defer func() { _ = b.forget(context.Background(), env, queue) }()
		pub, _, _, err := b.open(ctx, env)
		if err != nil {
			return Result{}, err
		}
		defer pub.Close()
		_, sub, _, err := b.open(ctx, env)
		if err != nil {
			return Result{}, err
		}
		defer sub.Close()
		msgs, err := sub.Subscribe(ctx, queue)
		if err != nil {
			return Result{}, err
		}
		got := countArrivals(msgs, n)
		batch := make([]*message.Message, n)
		for i := range batch {
			batch[i] = message.NewMessage(watermill.NewUUID(), plan.payload())
		}
		start := time.Now()
		failed, err := publishChunks(batch, 8, 100, func(ms []*message.Message) error { return pub.Publish(queue, ms...) })
		published := time.Since(start)
		if err != nil {
			return Result{}, fmt.Errorf("%d messages not published: %w", failed, err)
		}
		unique, dups, _, last := got.wait(ctx, 2*time.Minute)
		r := Result{
			System: name, Kind: KindCeiling, Messages: n,
			PublishRate: float64(n) / published.Seconds(),
			Counted:     true, Lost: n - unique, Duplicated: dups,
			Notes: []string{fmt.Sprintf("each publish waits for the broker's reply, 8 publishers × 100 a call, %d consumers; drain = round trip while publishing", streamConsumers)},
		}
		if unique > 0 {
			r.DrainRate = float64(unique) / last.Sub(start).Seconds()
			r.Figures = map[string]float64{"drain": r.DrainRate}
		}
		return r, nil
	}
}

// streamCeilings are the stream brokers' raw round trips.
func streamCeilings() []Ceiling {
	return []Ceiling{
		{Name: ceilingRedisRoundTrip, Needs: []string{"redis"}, Run: streamRoundTrip(redisBroker(), ceilingRedisRoundTrip)},
		{Name: ceilingNATSRoundTrip, Needs: []string{"nats"}, Run: streamRoundTrip(natsBroker(), ceilingNATSRoundTrip)},
	}
}

// streamSystems are the emulated pipeline on the stream brokers.
func streamSystems() []System {
	return []System{streamSystem(redisBroker()), streamSystem(natsBroker())}
}
