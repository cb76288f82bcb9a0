package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Subscriber consumes durable queues named as their topics, on a connection of its own. Queue
// semantics: each message goes to one subscription, so competing instances of an endpoint share
// its Timeouts and TimeoutsDispatcher queues. A message is acked when its handler acks it and
// requeued when it nacks it. The queue is created durable when missing; one that exists is used
// as it is.
type Subscriber struct {
	conn      *wamqp.ConnectionWrapper
	sub       *wamqp.Subscriber
	consumers int
	closing   chan struct{} // closed by Close

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
	sub, err := wamqp.NewSubscriberWithConnection(config.watermillConfig(topology{conn: conn, args: config.QueueArguments}), logger, conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("amqptransport: creating the subscriber on %s: %w", Redact(config.URL), redactError(err, config.URL))
	}
	return &Subscriber{conn: conn, sub: sub, consumers: config.Consumers, closing: make(chan struct{})}, nil
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

// Subscribe consumes the queue named topic with Config.Consumers consumers until ctx is done or
// the Subscriber is closed; the channel closes when they have all stopped.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	if s.consumers <= 1 {
		ch, err := s.sub.Subscribe(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("amqptransport: subscribing to %q: %w", topic, err)
		}
		return ch, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	ins := make([]<-chan *message.Message, 0, s.consumers)
	for range s.consumers {
		ch, err := s.sub.Subscribe(ctx, topic)
		if err != nil {
			cancel() // stops the consumers started so far
			return nil, fmt.Errorf("amqptransport: subscribing to %q: %w", topic, err)
		}
		ins = append(ins, ch)
	}
	return merge(ctx, s.closing, ins, cancel), nil
}

// merge forwards every message of ins to one channel, closed (and done called) once all of ins
// are closed. Once ctx is done or closing is closed, a message nobody takes is nacked, so that it
// returns to its queue and its consumer can stop.
func merge(ctx context.Context, closing <-chan struct{}, ins []<-chan *message.Message, done func()) <-chan *message.Message {
	out := make(chan *message.Message)
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range in {
				select {
				case out <- msg:
				case <-ctx.Done():
					msg.Nack()
				case <-closing:
					msg.Nack()
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		done()
		close(out)
	}()
	return out
}

// SubscribeInitialize declares the queue named topic without consuming it.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	if err := s.sub.SubscribeInitialize(topic); err != nil {
		return fmt.Errorf("amqptransport: declaring %q: %w", topic, err)
	}
	return nil
}

// Close stops every subscription (unacked messages return to their queues) and closes the
// connection. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		err := s.sub.Close()
		s.closeErr = errors.Join(err, s.conn.Close())
	})
	return s.closeErr
}
