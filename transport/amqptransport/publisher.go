package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/internal/amqpmarshal"
	"github.com/timeoutmill/timeoutmill/internal/announce"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ErrInvalidTopic is returned for a topic that cannot name a queue.
var ErrInvalidTopic = errors.New("amqptransport: invalid topic")

// ErrNotConfirmed is returned when the broker refused a message (a negative publisher confirm)
// or the channel closed before it confirmed it.
var ErrNotConfirmed = errors.New("amqptransport: message not confirmed by the broker")

// maxQueueName is AMQP's limit on a queue name (a short string).
const maxQueueName = 255

// Publisher publishes Watermill messages to durable queues named as their topics, as persistent
// messages, on a connection of its own that is made again when lost. Publish returns once the
// broker has confirmed every message (publisher confirms: for persistent messages on durable
// queues, written to disk; with Config.TransientAnnouncements, the poller's announcements of due
// ids are transient and confirmed without waiting for the disk).
//
// One Publish call sends its messages in order on one channel of the pool and then waits for
// their confirms together, so a batch costs about one round trip, not one per message
// (watermill-amqp's own publisher waits for each confirm before sending the next message). The
// channel goes back to the pool once the messages are sent, so concurrent calls (the dispatch
// satellite's handlers, each forwarding one message) share channels while they wait: confirms
// are pipelined, and the pool bounds the calls sending at once, not the messages unconfirmed.
//
// Before the first publish to a topic on a connection it makes sure the topic's queue exists,
// creating it durable if not: RabbitMQ silently drops a message published for a queue that does
// not exist, and a due message must never be published into the void. A queue that cannot be
// declared (a reserved amq.* name, no permission) makes Publish fail, so the dispatch satellite
// counts a failed forward and, past its retries, moves the message to the error queue.
type Publisher struct {
	conn      *amqpconn.Conn
	pool      *channelPool
	declarer  *declarer
	marshaler amqpmarshal.Marshaler
	logger    watermill.LoggerAdapter
	// transientAnnouncements publishes dispatcherqueue announcements as transient messages.
	transientAnnouncements bool

	closeOnce sync.Once
	closeErr  error
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher connects to the broker and returns a Publisher. It fails when the broker cannot be
// reached now; once connected, it reconnects by itself whenever the connection is lost.
func NewPublisher(config Config, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	logger = withBroker(logger, config)
	conn, err := connect(config, "publisher", logger)
	if err != nil {
		return nil, err
	}
	return &Publisher{
		conn:     conn,
		pool:     newChannelPool(conn, config.ChannelPoolSize),
		declarer: newDeclarer(conn, config.QueueArguments),
		logger:   logger,

		transientAnnouncements: config.TransientAnnouncements,
	}, nil
}

// Publish publishes messages, in order, to the queue named topic, declaring it first if this
// connection has not declared it yet. It returns when the broker has confirmed every message.
// The first message's context bounds the call. While the connection is down (a broker restart)
// it fails at once; the connection is made again meanwhile. On an error, messages before the
// failing one may have been delivered: publishing is at least once.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	if len(messages) == 0 {
		return nil
	}
	ctx := messages[0].Context()
	if err := p.declarer.ensure(ctx, false, topic); err != nil {
		return fmt.Errorf("amqptransport: publishing to %q: %w", topic, err)
	}
	if err := p.publish(ctx, topic, messages); err != nil {
		return fmt.Errorf("amqptransport: publishing %d message(s) to %q: %w", len(messages), topic, err)
	}
	return nil
}

// publish publishes messages and waits for their confirms. Calls share channels (see send), so
// a channel the broker closes for one call's message (one larger than its max_message_size, say)
// fails the confirms of the others on it too: a call whose channel closed under it publishes its
// messages once more, from the first one not confirmed, on a channel of its own, which no other
// call's message can close. Only a message that closes channels itself fails twice, and its error
// says why the broker closed the channel.
func (p *Publisher) publish(ctx context.Context, topic string, messages []*message.Message) error {
	c, err := p.pool.get(ctx)
	if err != nil {
		return err
	}
	err = p.publishOn(ctx, c, func() { p.pool.put(c) }, topic, messages)
	var closed *channelClosedError
	if !errors.As(err, &closed) {
		return err
	}
	p.logger.Debug("The channel closed under a publish; publishing again on a channel of its own",
		watermill.LogFields{"topic": topic, "reason": closed.Error()})
	if c, err = p.pool.private(); err != nil {
		return err
	}
	defer func() {
		if !c.ch.IsClosed() {
			_ = c.ch.Close()
		}
	}()
	return p.publishOn(ctx, c, func() {}, topic, messages[closed.index:])
}

// publishOn sends messages on c, calls sent, and waits for their confirms.
func (p *Publisher) publishOn(ctx context.Context, c pooledChannel, sent func(), topic string, messages []*message.Message) error {
	confirms, err := p.send(ctx, c, topic, messages)
	sent()
	if err != nil {
		return err
	}
	for i, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("waiting for the confirm of message %s: %w", messages[i].UUID, err)
		}
		if !ok {
			if reason := c.reason(); reason != nil {
				return &channelClosedError{index: i, id: messages[i].UUID, reason: reason}
			}
			return fmt.Errorf("%w: message %s", ErrNotConfirmed, messages[i].UUID)
		}
	}
	p.logger.Trace("Messages published and confirmed", watermill.LogFields{"topic": topic, "count": len(messages)})
	return nil
}

// channelClosedError is a message whose confirm failed because the broker closed its channel:
// the call's messages before index were confirmed.
type channelClosedError struct {
	index  int
	id     string
	reason *amqp.Error
}

func (e *channelClosedError) Error() string {
	return fmt.Sprintf("%s: message %s: the broker closed the channel it was sent on: %s", ErrNotConfirmed, e.id, e.reason)
}

func (e *channelClosedError) Unwrap() []error { return []error{ErrNotConfirmed, e.reason} }

// send sends messages on c and returns their deferred confirms. A pooled channel goes back to the
// pool as soon as they are sent, not when they are confirmed: other calls then send on it while
// these wait, so that a channel carries many unconfirmed messages (pipelined confirms) and the
// pool bounds only the calls sending at once. A channel closed meanwhile settles its pending
// confirms as nacks.
func (p *Publisher) send(ctx context.Context, c pooledChannel, topic string, messages []*message.Message) ([]*amqp.DeferredConfirmation, error) {
	confirms := make([]*amqp.DeferredConfirmation, len(messages))
	for i, msg := range messages {
		publishing, err := p.marshaler.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("marshaling message %s: %w", msg.UUID, err)
		}
		if p.transientAnnouncements && announce.IsAnnouncement(msg.Context()) {
			publishing.DeliveryMode = amqp.Transient
		}
		dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, "", topic, false, false, publishing)
		if err != nil {
			if reason := c.reason(); reason != nil {
				return nil, &channelClosedError{id: msg.UUID, reason: reason} // none was confirmed yet
			}
			return nil, fmt.Errorf("sending message %s: %w", msg.UUID, err)
		}
		confirms[i] = dc
	}
	return confirms, nil
}

// DeclareEndpoint declares the queues of endpoint's timeout manager, Endpoint.Timeouts and
// Endpoint.TimeoutsDispatcher, and the error queue ("" means wire.DefaultErrorQueue): the
// installers. Queues that exist are left as they are, so it is idempotent. It asks the broker
// each time, even for queues this Publisher declared before.
func (p *Publisher) DeclareEndpoint(ctx context.Context, endpoint, errorQueue string) error {
	if err := wireparse.ValidateName("endpoint", endpoint); err != nil {
		return fmt.Errorf("amqptransport: %w", err)
	}
	if errorQueue == "" {
		errorQueue = wire.DefaultErrorQueue
	}
	if err := wireparse.ValidateName("error queue", errorQueue); err != nil {
		return fmt.Errorf("amqptransport: %w", err)
	}
	return p.DeclareQueues(ctx, wire.TimeoutsQueue(endpoint), wire.DispatcherQueue(endpoint), errorQueue)
}

// DeclareQueues makes sure each queue exists, creating missing ones durable, as Publish does
// before its first message to a topic (an application may declare its destinations up front).
func (p *Publisher) DeclareQueues(ctx context.Context, queues ...string) error {
	for _, q := range queues {
		if err := validateTopic(q); err != nil {
			return err
		}
	}
	if err := p.declarer.ensure(ctx, true, queues...); err != nil {
		return fmt.Errorf("amqptransport: %w", err)
	}
	return nil
}

// Close waits for publishes in flight, then closes the channels and the connection. Publish
// fails with ErrClosed afterwards. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		err := p.pool.close()
		p.closeErr = errors.Join(err, p.conn.Close())
	})
	return p.closeErr
}

func validateTopic(topic string) error {
	switch {
	case topic == "":
		// The default exchange would drop it, and declaring "" asks for a server-named queue.
		return fmt.Errorf("%w: the topic is empty", ErrInvalidTopic)
	case len(topic) > maxQueueName:
		return fmt.Errorf("%w: %q is longer than AMQP's %d bytes", ErrInvalidTopic, topic, maxQueueName)
	}
	return nil
}

// connect opens the connection of one role, which is made again by itself when lost.
func connect(config Config, role string, logger watermill.LoggerAdapter) (*amqpconn.Conn, error) {
	conn, err := amqpconn.Dial(config.URL, config.amqpConfig(role), config.backoff(), logger)
	if err != nil {
		return nil, fmt.Errorf("amqptransport: connecting the %s to %s: %w", role, amqpconn.Redact(config.URL), amqpconn.RedactError(err, config.URL))
	}
	return conn, nil
}

func withBroker(logger watermill.LoggerAdapter, config Config) watermill.LoggerAdapter {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return logger.With(watermill.LogFields{"broker": amqpconn.Redact(config.URL)})
}
