package natstransport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/timeoutmill/timeoutmill/wire"
)

// connectTimeout bounds the first connection; reconnections are retried for ever.
const connectTimeout = 10 * time.Second

// Publisher publishes to JetStream, each message waiting for the stream's acknowledgement.
type Publisher struct {
	*wnats.Publisher
	streams *streams
}

// Subscriber consumes through durable consumers with a deliver group (see the package
// documentation).
type Subscriber struct {
	*wnats.Subscriber
	config  Config
	streams *streams
}

// New connects to NATS (one connection for publishing, one for consuming) and returns a
// Publisher and a Subscriber on it. The server must be reachable now; later outages are ridden
// out (see the package documentation).
func New(config Config, logger watermill.LoggerAdapter) (*Publisher, *Subscriber, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	pubConn, err := connect(config, "publisher")
	if err != nil {
		return nil, nil, err
	}
	subConn, err := connect(config, "subscriber")
	if err != nil {
		pubConn.Close()
		return nil, nil, err
	}
	closeBoth := func() { pubConn.Close(); subConn.Close() }
	pubJS, err := pubConn.JetStream()
	if err != nil {
		closeBoth()
		return nil, nil, fmt.Errorf("natstransport: %w", err)
	}
	subJS, err := subConn.JetStream()
	if err != nil {
		closeBoth()
		return nil, nil, fmt.Errorf("natstransport: %w", err)
	}
	jsConfig := wnats.JetStreamConfig{
		// The streams are this package's to create (see streams.ensure): watermill-nats would name
		// a stream after its topic, and stream names cannot hold the dots of E.Timeouts.
		AutoProvision:     false,
		SubscribeOptions:  []nats.SubOpt{nats.ManualAck()},
		DurablePrefix:     config.Durable,
		DurableCalculator: func(_, topic string) string { return config.ConsumerName(topic) },
	}
	pub, err := wnats.NewPublisherWithNatsConn(pubConn, wnats.PublisherPublishConfig{Marshaler: marshaler{}, JetStream: jsConfig}, logger)
	if err != nil {
		closeBoth()
		return nil, nil, fmt.Errorf("natstransport: %w", err)
	}
	sub, err := wnats.NewSubscriberWithNatsConn(subConn, wnats.SubscriberSubscriptionConfig{
		Unmarshaler:      marshaler{},
		QueueGroupPrefix: config.Durable,
		SubscribersCount: config.Consumers,
		AckWaitTimeout:   config.AckWait,
		JetStream:        jsConfig,
	}, logger)
	if err != nil {
		closeBoth()
		return nil, nil, fmt.Errorf("natstransport: %w", err)
	}
	return &Publisher{Publisher: pub, streams: newStreams(pubJS)},
		&Subscriber{Subscriber: sub, config: config, streams: newStreams(subJS)}, nil
}

func connect(config Config, role string) (*nats.Conn, error) {
	conn, err := nats.Connect(config.URL,
		nats.Name(config.Durable+" "+role),
		nats.Timeout(connectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
	)
	if err != nil {
		return nil, fmt.Errorf("natstransport: connecting: %w", err)
	}
	return conn, nil
}

// Publish makes sure a stream captures topic (once per topic), then publishes messages one by
// one, each waiting for JetStream's acknowledgement.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	if err := p.streams.ensure(topic, nats.LimitsPolicy); err != nil {
		return err
	}
	return p.Publisher.Publish(topic, messages...)
}

// DeclareEndpoint creates the streams of endpoint (E.Timeouts and E.TimeoutsDispatcher, with
// work-queue retention) and of the error queue (wire.DefaultErrorQueue when empty; limits
// retention, so that it can be read more than once), where no stream captures them yet.
func (p *Publisher) DeclareEndpoint(_ context.Context, endpoint, errorQueue string) error {
	if errorQueue == "" {
		errorQueue = wire.DefaultErrorQueue
	}
	for _, q := range []string{wire.TimeoutsQueue(endpoint), wire.DispatcherQueue(endpoint)} {
		if err := p.streams.ensure(q, nats.WorkQueuePolicy); err != nil {
			return err
		}
	}
	return p.streams.ensure(errorQueue, nats.LimitsPolicy)
}

// DeclareQueues creates a stream (limits retention) for each topic no stream captures yet.
func (p *Publisher) DeclareQueues(_ context.Context, topics ...string) error {
	for _, t := range topics {
		if err := p.streams.ensure(t, nats.LimitsPolicy); err != nil {
			return err
		}
	}
	return nil
}

// Subscribe makes sure a stream captures topic and its durable consumer exists, then consumes it
// with Config.Consumers members of the deliver group.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	return s.Subscriber.Subscribe(ctx, topic)
}

// SubscribeInitialize creates topic's stream (limits retention) and durable consumer where
// missing. The consumer is created here rather than by the subscription: nats.go deletes a
// consumer it created when the subscription ends, under the other instances still using it.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if err := s.streams.ensure(topic, nats.LimitsPolicy); err != nil {
		return err
	}
	stream, err := s.streams.js.StreamNameBySubject(topic)
	if err != nil {
		return fmt.Errorf("natstransport: finding the stream of %s: %w", topic, err)
	}
	name := s.config.ConsumerName(topic)
	if _, err := s.streams.js.ConsumerInfo(stream, name); err == nil {
		return nil
	} else if !errors.Is(err, nats.ErrConsumerNotFound) {
		return fmt.Errorf("natstransport: consumer %s of stream %s: %w", name, stream, err)
	}
	_, err = s.streams.js.AddConsumer(stream, &nats.ConsumerConfig{
		Durable:        name,
		DeliverSubject: "_timeoutmill.deliver." + name,
		DeliverGroup:   s.config.Durable,
		FilterSubject:  topic,
		DeliverPolicy:  nats.DeliverAllPolicy,
		AckPolicy:      nats.AckExplicitPolicy,
		AckWait:        s.config.AckWait,
		MaxDeliver:     -1,
	})
	if err != nil {
		if _, again := s.streams.js.ConsumerInfo(stream, name); again == nil {
			return nil // another instance created it meanwhile
		}
		return fmt.Errorf("natstransport: creating consumer %s of stream %s: %w", name, stream, err)
	}
	return nil
}

// streams makes sure a stream captures a subject, remembering subjects it has seen captured.
type streams struct {
	js   nats.JetStreamContext
	mu   sync.Mutex
	seen map[string]bool
}

func newStreams(js nats.JetStreamContext) *streams {
	return &streams{js: js, seen: map[string]bool{}}
}

func (s *streams) ensure(subject string, retention nats.RetentionPolicy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[subject] {
		return nil
	}
	_, err := s.js.StreamNameBySubject(subject)
	if errors.Is(err, nats.ErrNoMatchingStream) {
		_, err = s.js.AddStream(&nats.StreamConfig{
			Name:      StreamName(subject),
			Subjects:  []string{subject},
			Retention: retention,
			Storage:   nats.FileStorage,
		})
		if err != nil {
			if _, again := s.js.StreamNameBySubject(subject); again == nil {
				err = nil // another instance created it meanwhile
			}
		}
	}
	if err != nil {
		return fmt.Errorf("natstransport: stream for %s: %w", subject, err)
	}
	s.seen[subject] = true
	return nil
}
