package redistransport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/timeoutmill/timeoutmill/wire"
)

// Publisher adds messages to streams: the messages of one Publish call in one pipeline of XADDs,
// so that Redis writes (and, with appendfsync always, syncs) them together; Publish returns once
// Redis replied to all of them.
type Publisher struct {
	client *redis.Client
	group  string

	mu     sync.Mutex
	closed bool
}

// Subscriber reads streams in a consumer group (see the package documentation).
type Subscriber struct {
	config Config
	logger watermill.LoggerAdapter

	mu      sync.Mutex
	subs    []*redisstream.Subscriber
	closed  bool
	closing chan struct{}
	running sync.WaitGroup // subscriptions until their channel is closed
}

// New connects to Redis and returns a Publisher and a Subscriber on it. Redis must answer a PING
// now; later outages are ridden out (see the package documentation).
func New(ctx context.Context, config Config, logger watermill.LoggerAdapter) (*Publisher, *Subscriber, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	client, err := config.client()
	if err != nil {
		return nil, nil, err
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("redistransport: %w", err)
	}
	return &Publisher{client: client, group: config.ConsumerGroup},
		&Subscriber{config: config, logger: logger, closing: make(chan struct{})}, nil
}

// Publish adds messages to topic's stream in one pipeline, in order. An error means some may not
// have been added.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return errors.New("redistransport: publisher closed")
	}
	if len(messages) == 0 {
		return nil
	}
	ctx := messages[0].Context()
	_, err := p.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, msg := range messages {
			values, err := marshaller{}.Marshal(topic, msg)
			if err != nil {
				return fmt.Errorf("redistransport: message %s: %w", msg.UUID, err)
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: values})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistransport: adding %d messages to stream %s: %w", len(messages), topic, err)
	}
	return nil
}

// Close closes the connection pool.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.client.Close()
}

// DeclareEndpoint creates the streams of endpoint (E.Timeouts, E.TimeoutsDispatcher) and the
// error queue (wire.DefaultErrorQueue when empty), each with the consumer group, where missing.
func (p *Publisher) DeclareEndpoint(ctx context.Context, endpoint, errorQueue string) error {
	if errorQueue == "" {
		errorQueue = wire.DefaultErrorQueue
	}
	return p.DeclareQueues(ctx, wire.TimeoutsQueue(endpoint), wire.DispatcherQueue(endpoint), errorQueue)
}

// DeclareQueues creates each stream with the consumer group, reading from its first entry, where
// missing; existing ones are left as they are.
func (p *Publisher) DeclareQueues(ctx context.Context, streams ...string) error {
	for _, s := range streams {
		if err := createGroup(ctx, p.client, s, p.group); err != nil {
			return err
		}
	}
	return nil
}

func createGroup(ctx context.Context, client redis.UniversalClient, stream, group string) error {
	err := client.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redistransport: creating consumer group %s of stream %s: %w", group, stream, err)
	}
	return nil
}

// Subscribe reads topic's stream in the consumer group with Config.Consumers consumers, each on a
// connection of its own, and returns their messages on one channel.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("redistransport: subscriber closed")
	}
	out := make(chan *message.Message)
	var wg sync.WaitGroup
	for i := range s.config.Consumers {
		client, err := s.config.client()
		if err != nil {
			return nil, err
		}
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:        client,
			Unmarshaller:  marshaller{},
			ConsumerGroup: s.config.ConsumerGroup,
			// Unique per subscription, so that a consumer that went away leaves its pending
			// entries to be claimed rather than to a namesake.
			Consumer:    fmt.Sprintf("%s-%d", watermill.NewShortUUID(), i),
			OldestId:    "0",
			MaxIdleTime: s.config.ClaimAfter,
			// Claim more often than the default 5 s only when entries may be claimed that soon.
			ClaimInterval: min(redisstream.DefaultClaimInterval, max(s.config.ClaimAfter/2, 100*time.Millisecond)),
			// Without it the first read blocks until an entry comes, and Close waits for it.
			DisableIndefiniteInitialBlock: true,
			ConsumerTimeout:               max(redisstream.DefaultConsumerTimeout, 2*s.config.ClaimAfter),
		}, s.logger)
		if err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("redistransport: %w", err)
		}
		s.subs = append(s.subs, sub)
		msgs, err := sub.Subscribe(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("redistransport: subscribing to stream %s: %w", topic, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				if !s.handOver(ctx, client, out, m) {
					return
				}
			}
		}()
	}
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		wg.Wait()
		close(out)
	}()
	return out, nil
}

// handOver hands a copy of m to out and settles m as the copy was settled. A nacked message is
// handed again (watermill-redisstream does that at once) only once Redis answers a PING: a
// handler that failed because Redis went away (a forward that could not be published) is tried
// again when it is back, as a broker that requeues on reconnection would, rather than in a loop
// during the outage. It returns false when the subscription ends.
func (s *Subscriber) handOver(ctx context.Context, client *redis.Client, out chan<- *message.Message, m *message.Message) bool {
	c := m.Copy()
	c.SetContext(m.Context())
	select {
	case out <- c:
	case <-ctx.Done():
		return false
	case <-s.closing: // not handed over, so not acked: claimed again later
		return false
	}
	select {
	case <-c.Acked():
		m.Ack()
		return true
	case <-c.Nacked():
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
	for client.Ping(ctx).Err() != nil {
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return false
		case <-s.closing:
			return false
		}
	}
	m.Nack()
	return true
}

// SubscribeInitialize creates topic's stream and the consumer group where missing.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	client, err := s.config.client()
	if err != nil {
		return err
	}
	defer client.Close()
	return createGroup(context.Background(), client, topic, s.config.ConsumerGroup)
}

// Close stops every subscription; entries handed out and not yet acknowledged stay pending, to be
// claimed by another consumer after Config.ClaimAfter.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.closing)
	var errs []error
	for _, sub := range s.subs {
		errs = append(errs, sub.Close())
	}
	s.running.Wait() // every subscription's channel is closed when Close returns
	return errors.Join(errs...)
}
