package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/internal/exclusive"
)

// ErrSubscriberClosed is returned by Subscribe on a closed Subscriber.
var ErrSubscriberClosed = errors.New("amqptransport: subscriber is closed")

// Subscriber consumes durable queues named as their topics, on a connection of its own. Queue
// semantics: each message goes to one subscription, so competing instances of an endpoint share
// its Timeouts and TimeoutsDispatcher queues. A message is acked when its handler acks it and
// requeued when it nacks it. The queue is created durable when missing; one that exists is used
// as it is.
type Subscriber struct {
	conn      *amqpconn.Conn
	consumers int
	prefetch  int
	finish    time.Duration
	args      amqp.Table
	logger    watermill.LoggerAdapter
	closing   chan struct{} // closed by Close
	running   sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber connects to the broker and returns a Subscriber. It fails when the broker cannot
// be reached now; once connected, it reconnects by itself whenever the connection is lost, and
// its subscriptions resume.
func NewSubscriber(config Config, logger watermill.LoggerAdapter) (*Subscriber, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	logger = withBroker(logger, config)
	conn, err := connect(config, "subscriber", logger)
	if err != nil {
		return nil, err
	}
	return &Subscriber{
		conn: conn, consumers: config.Consumers, prefetch: config.PrefetchCount, finish: config.CloseTimeout,
		args: config.QueueArguments, logger: logger, closing: make(chan struct{}),
	}, nil
}

// New returns a Publisher and a Subscriber on two connections to the broker (RabbitMQ throttles
// a publishing connection under memory pressure; consumers on their own connection keep acking).
func New(config Config, logger watermill.LoggerAdapter) (*Publisher, *Subscriber, error) {
	pub, err := NewPublisher(config, logger)
	if err != nil {
		return nil, nil, err
	}
	sub, err := NewSubscriber(config, logger)
	if err != nil {
		_ = pub.Close()
		return nil, nil, err
	}
	return pub, sub, nil
}

// Subscribe consumes the queue named topic until ctx is done or the Subscriber is closed; the
// channel closes when consuming has stopped. A subscription is one channel (see consumer) that
// hands out up to Config.Consumers messages at once; with Consumers 1, one message at a time, each
// once the previous one was settled, in queue order.
//
// recoverability's deferred queues are consumed exclusively (internal/exclusive): Subscribe then
// waits until it consumes, and fails with recoverability.ErrDeferredQueueInUse while another
// consumer, in any process, holds the queue.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	select {
	case <-s.closing:
		return nil, fmt.Errorf("amqptransport: subscribing to %q: %w", topic, ErrSubscriberClosed)
	default:
	}
	c := &consumer{
		conn: s.conn, queue: topic, args: s.args, handlers: s.consumers, prefetch: s.consumers + s.prefetch, closeTimeout: s.finish,
		logger: s.logger.With(watermill.LogFields{"topic": topic}), closing: s.closing, out: make(chan *message.Message),
	}
	// The first declaration fails Subscribe; later ones (after a reconnection) are retried.
	conn, err := currentConnection(s.conn)
	if err == nil {
		err = declareQueue(conn, topic, s.args)
	}
	if err != nil {
		return nil, fmt.Errorf("amqptransport: subscribing to %q: %w", topic, err)
	}
	if exclusive.Requested(ctx) {
		c.exclusive, c.started = true, make(chan error, 1)
	}
	ctx, stop := context.WithCancel(ctx)
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		defer stop()
		c.run(ctx)
	}()
	if c.started != nil {
		select {
		case err = <-c.started:
		case <-ctx.Done():
			err = ctx.Err()
		case <-s.closing:
			err = ErrSubscriberClosed
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("amqptransport: subscribing to %q: %w", topic, err)
		}
	}
	return c.out, nil
}

// SubscribeInitialize declares the queue named topic without consuming it.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	conn, err := currentConnection(s.conn)
	if err == nil {
		err = declareQueue(conn, topic, s.args)
	}
	if err != nil {
		return fmt.Errorf("amqptransport: declaring %q: %w", topic, err)
	}
	return nil
}

// Close stops every subscription (unacked messages return to their queues) and closes the
// connection. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.running.Wait()
		s.closeErr = s.conn.Close()
	})
	return s.closeErr
}
