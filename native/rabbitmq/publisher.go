package rabbitmq

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
	"github.com/timeoutmill/timeoutmill/internal/amqpmarshal"
	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

var (
	// ErrClosed is returned by a Publisher used after Close.
	ErrClosed = errors.New("rabbitmq: publisher is closed")
	// ErrNotConnected is returned while the connection to the broker is down; it is being
	// re-established meanwhile.
	ErrNotConnected = errors.New("rabbitmq: not connected to the broker")
)

// Publisher is a Watermill publisher that delays messages in RabbitMQ itself, through the 28
// delay levels, and delivers the others at once through the same delivery exchange. A message
// is delayed when it is marked as timeouts.Publisher reads it (timeouts.DeliverAt,
// timeouts.DeliverAfter, Watermill's delay.Message); the topic is the destination queue.
//
// Before its first message to a destination on a connection, it makes sure the destination
// queue exists (amqptransport's declaration: an existing queue is used as it is, a missing one
// is created durable) and is bound to the delivery exchange. Every message is published
// mandatory and confirmed: one the broker returns (a missing binding) or refuses makes Publish
// fail, never vanishes. Delivered messages keep their body, UUID and headers, less the timeout
// manager's routing headers; the broker adds x-death on the way, which amqptransport's
// Subscriber drops when the destination consumes them.
type Publisher struct {
	topo     nativedelay.Topology
	url      string
	conn     *amqpconn.Conn
	declarer *amqptransport.Publisher
	logger   watermill.LoggerAdapter
	now      func() time.Time

	// slots holds one entry per channel the Publisher may have open, nil for one not open.
	slots   chan *nativedelay.Sender
	size    int
	closing chan struct{}

	mu      sync.Mutex
	boundOn *amqp.Connection
	bound   map[string]struct{}

	closeOnce sync.Once
	closeErr  error
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher connects to the broker. It does not declare the delay infrastructure: run
// `timeoutmill native setup` or call Setup once.
func NewPublisher(config Config, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	topo, err := config.topology()
	if err != nil {
		return nil, err
	}
	declarer, err := amqptransport.NewPublisher(config.transportConfig(), logger) // it adds the broker to its logs
	if err != nil {
		return nil, err
	}
	logger = logger.With(watermill.LogFields{"broker": where(config.URL), "delay_prefix": config.Prefix})
	amqpConfig := config.amqpConfig("publisher")
	conn, err := amqpconn.Dial(config.URL, amqpConfig, amqpconn.BackoffOf(config.Reconnect), logger)
	if err != nil {
		_ = declarer.Close()
		return nil, fmt.Errorf("rabbitmq: connecting to %s: %w", where(config.URL), redactError(err, config.URL))
	}
	p := &Publisher{
		topo:     topo,
		url:      config.URL,
		conn:     conn,
		declarer: declarer,
		logger:   logger,
		now:      time.Now,
		slots:    make(chan *nativedelay.Sender, config.ChannelPoolSize),
		size:     config.ChannelPoolSize,
		closing:  make(chan struct{}),
		bound:    map[string]struct{}{},
	}
	for range config.ChannelPoolSize {
		p.slots <- nil
	}
	return p, nil
}

// Setup declares the delay infrastructure (idempotent): every exchange, queue and binding of the
// 28 levels, the delivery exchange and the probe queue, as `timeoutmill native setup` does. A
// queue that exists with other arguments (another TTL, another queue type) makes it fail with the
// broker's PRECONDITION_FAILED, naming the queue; Verify lists every such difference.
func (p *Publisher) Setup(ctx context.Context) error {
	conn, err := p.connection()
	if err != nil {
		return err
	}
	return p.topo.Setup(ctx, conn)
}

// Verify checks the delay infrastructure without changing it, as `timeoutmill native verify`
// does: nil when every exchange, queue, queue argument and binding is as Setup declares it, an
// error wrapping ErrTopology that lists each problem otherwise, or another error when it could
// not check.
func (p *Publisher) Verify(ctx context.Context) error {
	conn, err := p.connection()
	if err != nil {
		return err
	}
	return p.topo.Verify(ctx, conn)
}

// Publish publishes messages to the queue named topic: each delayed one through the delay
// levels, the others (and those already due) at once. It returns when the broker has confirmed
// every message, or an error: a delay beyond MaxDelay or an unusable topic before anything is
// sent; a returned or refused message after. The first message's context bounds the call.
// Publishing is at least once: on an error, other messages of the call may have been taken.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	if len(messages) == 0 {
		return nil
	}
	now := p.now()
	out := make([]Delayed, len(messages))
	for i, msg := range messages {
		due, _, err := wireparse.Due(msg.Metadata, now)
		if err != nil {
			return fmt.Errorf("rabbitmq: message %s for %s: %w", msg.UUID, topic, err)
		}
		if _, keyed := msg.Metadata[wire.HeaderKey]; keyed {
			return fmt.Errorf("rabbitmq: message %s for %s: %w: native delay cannot deduplicate by %s; schedule keyed messages with the timeout manager",
				msg.UUID, topic, wire.ErrInvalidHeader, wire.HeaderKey)
		}
		out[i] = Delayed{Destination: topic, Due: due, Message: msg}
	}
	results, err := p.Send(messages[0].Context(), now, out)
	if err != nil {
		return err
	}
	for i, rerr := range results {
		if rerr != nil {
			return fmt.Errorf("rabbitmq: publishing message %s to %s: %w", messages[i].UUID, topic, rerr)
		}
	}
	return nil
}

// Delayed is a message to deliver to Destination when Due comes (at once when Due is zero or
// not after now).
type Delayed struct {
	Destination string
	Due         time.Time
	Message     *message.Message
}

// Send publishes each message through the delay levels to its destination, delayed from now
// until its due time, and waits for the broker's confirms. results[i] is nil when the broker took
// message i; otherwise it says why not (ErrDelayTooLong, ErrInvalidDestination, ErrUnroutable,
// ErrNotConfirmed), and that message may be sent again. err is set when Send could not go on (no
// connection, a failed channel, ctx ended): messages without a result of nil may or may not have
// been taken then.
func (p *Publisher) Send(ctx context.Context, now time.Time, messages []Delayed) (results []error, err error) {
	results = make([]error, len(messages))
	out := make([]nativedelay.Outgoing, 0, len(messages))
	index := make([]int, 0, len(messages)) // out[j] is messages[index[j]]
	var destinations []string
	seen := map[string]struct{}{}
	for i, d := range messages {
		o, err := p.outgoing(now, d)
		if err != nil {
			results[i] = err
			continue
		}
		if _, ok := seen[d.Destination]; !ok {
			seen[d.Destination] = struct{}{}
			destinations = append(destinations, d.Destination)
		}
		out = append(out, o)
		index = append(index, i)
	}
	fail := func(err error) ([]error, error) {
		for _, i := range index {
			if results[i] == nil {
				results[i] = fmt.Errorf("%w: %w", ErrNotConfirmed, err)
			}
		}
		return results, err
	}
	if len(out) == 0 {
		return results, nil
	}
	if err := p.EnsureDestinations(ctx, destinations...); err != nil {
		return fail(err)
	}
	s, err := p.get(ctx)
	if err != nil {
		return fail(err)
	}
	sent, err := s.Send(ctx, out)
	if err != nil {
		s.Close()
		s = nil
		err = fmt.Errorf("rabbitmq: publishing: %w", err)
	}
	p.put(s)
	for j, r := range sent {
		results[index[j]] = r
	}
	return results, err
}

// outgoing is d as the message to publish: to the exchange of its highest delay bit, or to the
// delivery exchange when it is due, with the routing key of its delay and destination.
func (p *Publisher) outgoing(now time.Time, d Delayed) (nativedelay.Outgoing, error) {
	var delay time.Duration
	if !d.Due.IsZero() {
		delay = d.Due.Sub(now)
	}
	seconds, err := nativedelay.Seconds(delay)
	if err != nil {
		return nativedelay.Outgoing{}, fmt.Errorf("message %s for %s: %w", d.Message.UUID, d.Destination, err)
	}
	key, err := nativedelay.RoutingKey(seconds, d.Destination)
	if err != nil {
		return nativedelay.Outgoing{}, err
	}
	exchange := p.topo.DeliveryExchange()
	if level := nativedelay.Level(seconds); level >= 0 {
		exchange = p.topo.Exchange(level)
	}
	out := withoutRouting(d.Message)
	if !d.Due.IsZero() {
		out.Metadata.Set(wire.HeaderDue, wireparse.FormatExpire(wireparse.RoundUp(d.Due)))
	}
	msg, err := amqpmarshal.Marshaler{}.Marshal(out)
	if err != nil {
		return nativedelay.Outgoing{}, fmt.Errorf("marshaling message %s: %w", d.Message.UUID, err)
	}
	return nativedelay.Outgoing{Exchange: exchange, Key: key, Msg: msg}, nil
}

// withoutRouting is msg without the timeout manager's routing headers, which mean nothing to the
// destination (the dispatch satellite removes them too).
func withoutRouting(msg *message.Message) *message.Message {
	out := message.NewMessage(msg.UUID, msg.Payload)
	out.Metadata = make(message.Metadata, len(msg.Metadata))
	for k, v := range msg.Metadata {
		if !wireparse.IsRoutingHeader(k) {
			out.Metadata[k] = v
		}
	}
	return out
}

// EnsureDestinations makes sure each destination queue exists and is bound to the delivery
// exchange (on 28 "*" words and the queue's name; a legacy "#.<queue>" binding is removed, see
// the package documentation), asking the broker
// once per destination and connection.
func (p *Publisher) EnsureDestinations(ctx context.Context, destinations ...string) error {
	conn, err := p.connection()
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.boundOn != conn {
		p.boundOn, p.bound = conn, map[string]struct{}{}
	}
	var missing []string
	for _, d := range destinations {
		if _, ok := p.bound[d]; !ok {
			missing = append(missing, d)
		}
	}
	p.mu.Unlock()
	for _, d := range missing {
		if err := nativedelay.ValidateDestination(d); err != nil {
			return err
		}
		if err := p.declarer.DeclareQueues(ctx, d); err != nil {
			return fmt.Errorf("rabbitmq: destination %s: %w", d, err)
		}
		err := nativedelay.OnChannel(conn, func(ch *amqp.Channel) error { return p.topo.BindDestination(ch, d) })
		if nativedelay.AMQPCode(err) == amqp.NotFound {
			return fmt.Errorf("%w: binding destination %s to exchange %s: %s (run `timeoutmill native setup`)",
				ErrTopology, d, p.topo.DeliveryExchange(), nativedelay.Reason(err))
		}
		if err != nil {
			return fmt.Errorf("rabbitmq: binding destination %s to exchange %s: %w", d, p.topo.DeliveryExchange(), err)
		}
		p.mu.Lock()
		if p.boundOn == conn {
			p.bound[d] = struct{}{}
		}
		p.mu.Unlock()
	}
	return nil
}

// DestinationExists reports whether the queue named destination exists, without creating it.
func (p *Publisher) DestinationExists(ctx context.Context, destination string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	conn, err := p.connection()
	if err != nil {
		return false, err
	}
	err = nativedelay.OnChannel(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(destination, true, false, false, false, nil)
		return err
	})
	switch {
	case err == nil:
		return true, nil
	case nativedelay.AMQPCode(err) == amqp.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("rabbitmq: checking queue %s: %w", destination, err)
}

// Close waits for sends in flight, then closes the channels and connections. It is safe to call
// more than once.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		close(p.closing)
		for range p.size {
			if s := <-p.slots; s != nil {
				s.Close()
			}
		}
		p.closeErr = errors.Join(p.declarer.Close(), p.conn.Close())
	})
	return p.closeErr
}

func (p *Publisher) connection() (*amqp.Connection, error) {
	select {
	case <-p.closing:
		return nil, ErrClosed
	default:
	}
	conn, err := p.conn.Current()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotConnected, err)
	}
	return conn, nil
}

// get waits for a free slot and returns a sender on the current connection; put gives it back.
func (p *Publisher) get(ctx context.Context) (*nativedelay.Sender, error) {
	var s *nativedelay.Sender
	select {
	case <-p.closing:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	case s = <-p.slots:
	}
	conn, err := p.connection()
	if err != nil {
		p.put(s)
		return nil, err
	}
	if s != nil && s.Usable(conn) {
		return s, nil
	}
	if s != nil {
		s.Close()
	}
	if s, err = nativedelay.NewSender(conn); err != nil {
		p.put(nil)
		return nil, err
	}
	return s, nil
}

func (p *Publisher) put(s *nativedelay.Sender) { p.slots <- s }
