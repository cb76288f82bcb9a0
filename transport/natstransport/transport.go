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

	"github.com/timeoutmill/timeoutmill/internal/connloss"
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
	conn    *nats.Conn
	config  Config
	streams *streams
	logger  watermill.LoggerAdapter

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	running sync.WaitGroup // subscriptions until their channel is closed
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
	pubConn, err := connect(config, "publisher", logger)
	if err != nil {
		return nil, nil, err
	}
	subConn, err := connect(config, "subscriber", logger)
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
		AutoProvision: false,
	}
	pub, err := wnats.NewPublisherWithNatsConn(pubConn, wnats.PublisherPublishConfig{Marshaler: marshaler{}, SubjectCalculator: wnats.DefaultSubjectCalculator, JetStream: jsConfig}, logger)
	if err != nil {
		closeBoth()
		return nil, nil, fmt.Errorf("natstransport: %w", err)
	}
	return &Publisher{Publisher: pub, streams: newStreams(pubJS, config.Replicas)},
		&Subscriber{conn: subConn, config: config, streams: newStreams(subJS, config.Replicas), logger: logger, closing: make(chan struct{})}, nil
}

func connect(config Config, role string, logger watermill.LoggerAdapter) (*nats.Conn, error) {
	conn, err := nats.Connect(config.URL,
		// A lost connection is made again to any server of the URL, or of the cluster it told of.
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				logger.Info("Connection lost; connecting again", watermill.LogFields{"role": role, "err": err.Error()})
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			logger.Info("Connected again", watermill.LogFields{"role": role, "server": c.ConnectedUrlRedacted()})
		}),
		nats.Name(config.Durable+" "+role),
		nats.Timeout(connectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		// No buffering while disconnected: a publish then fails at once, rather than time out
		// waiting for an acknowledgement and still reach the stream after the reconnection (a
		// forward counted as failed that was delivered after all).
		nats.ReconnectBufSize(-1),
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
		return connectionErr(err)
	}
	return connectionErr(p.Publisher.Publish(topic, messages...))
}

// connectionErrs are what NATS answers a publish with while the connection is down, being made
// again or closed, or while JetStream does not answer (a server starting, or a stream's leader
// moving): the road to the stream, not the message.
var connectionErrs = []error{
	nats.ErrReconnectBufExceeded, // disconnected: ReconnectBufSize(-1) fails a publish at once
	nats.ErrConnectionReconnecting, nats.ErrConnectionClosed, nats.ErrConnectionDraining,
	nats.ErrDisconnected, nats.ErrNoServers, nats.ErrStaleConnection,
	nats.ErrTimeout, nats.ErrNoResponders, nats.ErrNoStreamResponse,
}

// connectionErr marks err with connloss.ErrConnectionLost when it is one of connectionErrs, so
// that a forward failing for it is retried at the dispatch breaker's pace rather than counted as
// an attempt, sent to the error queue, or parked (the error queue is refused for the same reason).
// A stream that stays unreachable still trips the breaker: the critical error, never a silent loop.
func connectionErr(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range connectionErrs {
		if errors.Is(err, c) {
			return fmt.Errorf("%w: %w", connloss.ErrConnectionLost, err)
		}
	}
	return err
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
//
// The subscriptions are this package's rather than watermill-nats': its Subscriber closes a
// subscription's channel while a message may still be on its way into it (upstream, v2.1.3),
// which panics with a send on a closed channel when a router stops under load.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("natstransport: subscriber closed")
	}
	stream, consumer, err := s.initialize(topic)
	if err != nil {
		return nil, err
	}
	sc := &subscription{out: make(chan *message.Message), done: make(chan struct{}), closeWait: s.config.AckWait,
		logger: s.logger.With(watermill.LogFields{"topic": topic, "consumer": consumer})}
	var subs []*nats.Subscription
	for range s.config.Consumers {
		sub, err := s.streams.js.QueueSubscribe(topic, s.config.Durable, func(m *nats.Msg) { sc.handle(ctx, m) },
			nats.Bind(stream, consumer), nats.ManualAck())
		if err != nil {
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			return nil, fmt.Errorf("natstransport: subscribing to %s (consumer %s of stream %s): %w", topic, consumer, stream, err)
		}
		subs = append(subs, sub)
	}
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		select {
		case <-ctx.Done():
		case <-s.closing:
		}
		for _, sub := range subs {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				sc.logger.Error("Cannot unsubscribe", err, nil)
			}
		}
		sc.close()
	}()
	return sc.out, nil
}

// SubscribeInitialize creates topic's stream (limits retention) and durable consumer where
// missing. The consumer is created here rather than by the subscription: nats.go deletes a
// consumer it created when the subscription ends, under the other instances still using it.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	_, _, err := s.initialize(topic)
	return err
}

func (s *Subscriber) initialize(topic string) (stream, consumer string, err error) {
	if err := s.streams.ensure(topic, nats.LimitsPolicy); err != nil {
		return "", "", err
	}
	stream, err = s.streams.js.StreamNameBySubject(topic)
	if err != nil {
		return "", "", fmt.Errorf("natstransport: finding the stream of %s: %w", topic, err)
	}
	consumer = s.config.ConsumerName(topic)
	if _, err := s.streams.js.ConsumerInfo(stream, consumer); err == nil {
		return stream, consumer, nil
	} else if !errors.Is(err, nats.ErrConsumerNotFound) {
		return "", "", fmt.Errorf("natstransport: consumer %s of stream %s: %w", consumer, stream, err)
	}
	_, err = s.streams.js.AddConsumer(stream, &nats.ConsumerConfig{
		Durable:        consumer,
		DeliverSubject: "_timeoutmill.deliver." + stream + "." + consumer,
		DeliverGroup:   s.config.Durable,
		FilterSubject:  topic,
		DeliverPolicy:  nats.DeliverAllPolicy,
		AckPolicy:      nats.AckExplicitPolicy,
		AckWait:        s.config.AckWait,
		MaxDeliver:     -1,
		MaxAckPending:  s.config.MaxAckPending,
	})
	if err != nil {
		if _, again := s.streams.js.ConsumerInfo(stream, consumer); again == nil {
			return stream, consumer, nil // another instance created it meanwhile
		}
		return "", "", fmt.Errorf("natstransport: creating consumer %s of stream %s: %w", consumer, stream, err)
	}
	return stream, consumer, nil
}

// Close ends every subscription, waiting up to Config.AckWait for the messages handed out to be
// acknowledged, and closes the connection.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.running.Wait()
	s.conn.Close()
	return nil
}

// subscription hands the messages of one durable consumer to one channel, from the callbacks
// of its members, and closes the channel once no callback can send to it any more.
type subscription struct {
	out       chan *message.Message
	done      chan struct{}
	closeWait time.Duration
	logger    watermill.LoggerAdapter

	mu       sync.Mutex
	closed   bool
	inFlight sync.WaitGroup
}

// enter registers a callback, unless the subscription is closing.
func (sc *subscription) enter() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.closed {
		return false
	}
	sc.inFlight.Add(1)
	return true
}

func (sc *subscription) close() {
	sc.mu.Lock()
	sc.closed = true
	close(sc.done)
	sc.mu.Unlock()
	sc.inFlight.Wait()
	close(sc.out)
}

// handle hands one message over and settles it as its handler did. A message not handed over,
// or not settled before the subscription closed and closeWait passed, is left to JetStream,
// which delivers it again after AckWait.
func (sc *subscription) handle(ctx context.Context, m *nats.Msg) {
	if !sc.enter() {
		return
	}
	defer sc.inFlight.Done()
	msg, _ := marshaler{}.Unmarshal(m) // it never fails
	msgCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(msgCtx)
	select {
	case sc.out <- msg:
	case <-sc.done:
		return
	case <-ctx.Done():
		return
	}
	var wait <-chan time.Time
	stopping := sc.done
	for {
		select {
		case <-msg.Acked():
			if err := m.AckSync(); err != nil {
				sc.logger.Error("Cannot acknowledge; JetStream will deliver the message again", err, watermill.LogFields{"message_uuid": msg.UUID})
			}
			return
		case <-msg.Nacked():
			if err := m.Nak(); err != nil {
				sc.logger.Error("Cannot nak; JetStream will deliver the message again after AckWait", err, watermill.LogFields{"message_uuid": msg.UUID})
			}
			return
		case <-stopping:
			// Give a handler finishing during a shutdown the chance to have its ack delivered.
			stopping, wait = nil, time.After(sc.closeWait)
		case <-wait:
			return
		}
	}
}

// streams makes sure a stream captures a subject, remembering subjects it has seen captured.
type streams struct {
	js       nats.JetStreamContext
	replicas int // of the streams it creates
	mu       sync.Mutex
	seen     map[string]bool
}

func newStreams(js nats.JetStreamContext, replicas int) *streams {
	return &streams{js: js, replicas: replicas, seen: map[string]bool{}}
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
			Replicas:  s.replicas,
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
