package acceptance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/transport/redistransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// This file is the harness of the scenarios that hold on every broker (broker_*_test.go):
// RabbitMQ, Redis Streams and NATS JetStream, each through its transport package, with the store
// in SQLite so that the broker is the only server in play.

// brokerRedeliverAfter is how soon the test brokers hand a message again that a stopped
// consumer took and never acknowledged (Redis' ClaimAfter, JetStream's AckWait; RabbitMQ does
// it when the connection closes): short, so that a restart in a test costs seconds.
const brokerRedeliverAfter = 5 * time.Second

// pubSub is a broker's Publisher and Subscriber for one role.
type pubSub struct {
	pub     message.Publisher
	sub     message.Subscriber
	declare func(ctx context.Context, endpoint, errorQueue string) error
}

// broker is a Pub/Sub the scenarios run over.
type broker struct {
	name string
	// open connects a Publisher and a Subscriber whose subscriptions hand out up to consumers
	// messages at once; both are closed when t ends.
	open func(t *testing.T, role string, consumers int) pubSub
	// plain publishes to topic as a producer that is not Watermill would, with the broker's own
	// client: the id, the payload and each header in the broker's native form.
	plain func(t *testing.T, topic, id string, payload []byte, headers map[string]string)
	// forget deletes the queues or streams whose names start with prefix.
	forget func(t *testing.T, prefix string)
}

// brokers are the Pub/Subs every broker scenario runs on.
func brokers() []broker { return []broker{rabbitMQBroker(), redisBroker(), natsBroker()} }

// forEachBroker runs scenario on each broker, in parallel, with an endpoint of its own.
func forEachBroker(t *testing.T, tag string, scenario func(t *testing.T, e *brokerEnv)) {
	t.Helper()
	for _, b := range brokers() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			endpoint := "acc-" + b.name + "-" + tag + "-" + randomHex(t, 4)
			t.Cleanup(func() { b.forget(t, endpoint) })
			scenario(t, &brokerEnv{broker: b, endpoint: endpoint, errorQueue: endpoint + ".error"})
		})
	}
}

// brokerEnv is one test's endpoint on one broker; every queue it names starts with the endpoint.
type brokerEnv struct {
	broker
	endpoint   string
	errorQueue string
}

func (e *brokerEnv) queue(name string) string { return e.endpoint + "." + name }

// brokerNode is one running instance of the endpoint's timeout manager, as a `timeoutmill run`
// process would be: its own connections, its own router, its own store handle.
type brokerNode struct {
	manager *timeouts.Manager
	stop    func()
}

// startNode runs a timeout manager for e's endpoint on store, as the service runs it (several
// consumers per queue); mutate adjusts its config.
func (e *brokerEnv) startNode(t *testing.T, name string, store persistence.Store, mutate func(*timeouts.Config)) *brokerNode {
	t.Helper()
	ps := e.open(t, e.endpoint+" "+name, 16)
	require.NoError(t, ps.declare(context.Background(), e.endpoint, e.errorQueue))
	cfg := timeouts.Config{Endpoint: e.endpoint, Store: store, Publisher: ps.pub, Subscriber: ps.sub, ErrorQueue: e.errorQueue}
	if mutate != nil {
		mutate(&cfg)
	}
	logger := testLogger()
	manager, err := timeouts.NewManager(cfg, logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 15 * time.Second}, logger)
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var runErr error
	go func() {
		defer close(stopped)
		runErr = router.Run(ctx)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			_ = router.Close() // closes the subscriber too
			<-stopped
			<-manager.Done()
			require.NoError(t, manager.Err(), "no critical error")
		})
	}
	t.Cleanup(stop)
	select {
	case <-router.Running():
	case <-stopped:
		t.Fatalf("router stopped at start: %v", runErr)
	}
	return &brokerNode{manager: manager, stop: stop}
}

// receive consumes topic with a subscriber of its own and returns arrivals as they come.
func (e *brokerEnv) receive(t *testing.T, topic string) <-chan arrival {
	t.Helper()
	ps := e.open(t, e.endpoint+" receiver "+topic, 8)
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := ps.sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	out := make(chan arrival, 8192)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range msgs {
			out <- arrival{msg: m, at: time.Now()}
			m.Ack()
		}
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, ps.sub.Close())
		wg.Wait()
	})
	return out
}

func rabbitMQBroker() broker {
	return broker{
		name: "rabbitmq",
		open: func(t *testing.T, role string, consumers int) pubSub {
			cfg := amqptransport.Config{URL: testenv.AMQPURL(t), ConnectionName: role, Consumers: consumers, CloseTimeout: brokerRedeliverAfter}
			pub, sub, err := amqptransport.New(cfg, testLogger())
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, pub.Close()); require.NoError(t, sub.Close()) })
			return pubSub{pub: pub, sub: sub, declare: pub.DeclareEndpoint}
		},
		plain: func(t *testing.T, topic, id string, payload []byte, headers map[string]string) {
			conn, err := amqp.Dial(testenv.AMQPURL(t))
			require.NoError(t, err)
			defer conn.Close()
			ch, err := conn.Channel()
			require.NoError(t, err)
			require.NoError(t, ch.Confirm(false))
			table := amqp.Table{}
			for k, v := range headers {
				table[k] = v
			}
			conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", topic, true, false,
				amqp.Publishing{MessageId: id, Body: payload, Headers: table, DeliveryMode: amqp.Persistent})
			require.NoError(t, err)
			ok, err := conf.WaitContext(context.Background())
			require.NoError(t, err)
			require.True(t, ok, "confirmed")
		},
		forget: func(t *testing.T, prefix string) {
			conn, err := amqp.Dial(testenv.AMQPURL(t))
			require.NoError(t, err)
			defer conn.Close()
			deleteQueues(t, conn, queuesWithPrefix(t, prefix))
		},
	}
}

func redisBroker() broker {
	client := func(t *testing.T) *redis.Client {
		opts, err := redis.ParseURL(testenv.RedisURL(t))
		require.NoError(t, err)
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return broker{
		name: "redis",
		open: func(t *testing.T, _ string, consumers int) pubSub {
			cfg := redistransport.Config{URL: testenv.RedisURL(t), Consumers: consumers, ClaimAfter: brokerRedeliverAfter}
			pub, sub, err := redistransport.New(context.Background(), cfg, testLogger())
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, pub.Close()); require.NoError(t, sub.Close()) })
			return pubSub{pub: pub, sub: sub, declare: pub.DeclareEndpoint}
		},
		plain: func(t *testing.T, topic, id string, payload []byte, headers map[string]string) {
			// As redis-cli would: XADD topic * _watermill_message_uuid id payload ... header value ...
			values := []any{"_watermill_message_uuid", id, "payload", payload}
			for k, v := range headers {
				values = append(values, k, v)
			}
			require.NoError(t, client(t).XAdd(context.Background(), &redis.XAddArgs{Stream: topic, Values: values}).Err())
		},
		forget: func(t *testing.T, prefix string) {
			c := client(t)
			ctx := context.Background()
			keys, err := c.Keys(ctx, prefix+"*").Result()
			require.NoError(t, err)
			if len(keys) > 0 {
				require.NoError(t, c.Del(ctx, keys...).Err())
			}
		},
	}
}

func natsBroker() broker {
	jetStream := func(t *testing.T) nats.JetStreamContext {
		conn, err := nats.Connect(testenv.NATSURL(t))
		require.NoError(t, err)
		t.Cleanup(conn.Close)
		js, err := conn.JetStream()
		require.NoError(t, err)
		return js
	}
	return broker{
		name: "nats",
		open: func(t *testing.T, _ string, consumers int) pubSub {
			cfg := natstransport.Config{URL: testenv.NATSURL(t), Consumers: consumers, AckWait: brokerRedeliverAfter}
			pub, sub, err := natstransport.New(cfg, testLogger())
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, pub.Close()); require.NoError(t, sub.Close()) })
			return pubSub{pub: pub, sub: sub, declare: pub.DeclareEndpoint}
		},
		plain: func(t *testing.T, topic, id string, payload []byte, headers map[string]string) {
			// As the nats CLI would: nats pub topic payload -H _watermill_message_uuid:id -H ...
			msg := nats.NewMsg(topic)
			msg.Data = payload
			msg.Header.Set("_watermill_message_uuid", id)
			for k, v := range headers {
				msg.Header.Set(k, v)
			}
			_, err := jetStream(t).PublishMsg(msg)
			require.NoError(t, err)
		},
		forget: func(t *testing.T, prefix string) {
			js := jetStream(t)
			for name := range js.StreamNames() {
				if strings.HasPrefix(name, natstransport.StreamName(prefix)) {
					require.NoError(t, js.DeleteStream(name))
				}
			}
		},
	}
}

// timeoutsQueue is the endpoint's E.Timeouts.
func (e *brokerEnv) timeoutsQueue() string { return wire.TimeoutsQueue(e.endpoint) }

// sqliteStores makes an empty SQLite database for endpoint and returns a function that opens a
// store on it, as another process would.
func sqliteStores(t *testing.T, endpoint string) func(t *testing.T) persistence.Store {
	return backends()[0].database(t, endpoint)
}

// sqliteStore opens a store on an empty SQLite database of its own.
func sqliteStore(t *testing.T, endpoint string) persistence.Store {
	return sqliteStores(t, endpoint)(t)
}
