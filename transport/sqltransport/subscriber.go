package sqltransport

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Subscriber consumes topics as queues, through watermill-sql's Subscriber: every message goes to
// one consumer, however many Subscribers in however many processes consume its topic. Each
// Subscribe starts Config.Consumers consumers. A consumer, in one READ COMMITTED transaction,
// locks up to Config.BatchSize of the oldest rows no other consumer holds (FOR UPDATE SKIP
// LOCKED), hands them out one at a time, each once the previous was acked, and deletes the acked
// ones when the batch ends (on MySQL: marks them acked, and deletes them a second or so later);
// a nacked message is handed out again after Config.ResendInterval.
// When it finds nothing it waits Config.PollInterval.
//
// Acks are therefore committed when the batch ends, not when Ack is called: a process that stops
// in the middle of a batch (or crashes) leaves its rows in the table, and they are handed out
// again. Delivery is at least once; the timeout manager's satellites are idempotent to that.
type Subscriber struct {
	config Config
	db     *sql.DB
	ownsDB bool
	tables *tableCache
	sub    *wsql.Subscriber
	logger watermill.LoggerAdapter

	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	workers   sync.WaitGroup // merging consumers' channels, purging

	mu        sync.Mutex
	consumers int                  // started, to keep that many idle connections in an owned pool
	cancels   []context.CancelFunc // stop the subscriptions' consumers
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber opens a pool on config.DSN (or uses config.DB) and checks that the database
// answers. It fails when the database cannot be reached now.
func NewSubscriber(ctx context.Context, config Config, logger watermill.LoggerAdapter) (*Subscriber, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	logger = loggerOrNop(logger)
	db, owns, err := openDB(ctx, config, "subscriber", 0)
	if err != nil {
		return nil, err
	}
	n := config.names()
	ackDeadline := config.AckDeadline
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
		AckDeadline:    &ackDeadline,
		PollInterval:   config.PollInterval,
		ResendInterval: config.ResendInterval,
		RetryInterval:  config.RetryInterval,
		BackoffManager: backoff{poll: config.PollInterval, retry: config.RetryInterval},
		SchemaAdapter:  queueSchema{names: n, batchSize: config.BatchSize},
		OffsetsAdapter: queueOffsets{names: n},
	}, logger)
	if err != nil {
		if owns {
			_ = db.Close()
		}
		return nil, fmt.Errorf("sqltransport: %w", err)
	}
	return &Subscriber{
		config:  config,
		db:      db,
		ownsDB:  owns,
		tables:  newTableCache(db, n, config.SkipSchemaInitialization),
		sub:     sub,
		logger:  logger,
		closing: make(chan struct{}),
	}, nil
}

// Subscribe starts Config.Consumers consumers on topic's table, creating it first if needed,
// and returns their messages on one channel, which is closed when ctx ends or the Subscriber
// closes.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, ErrClosed
	default:
	}
	if err := s.tables.ensure(ctx, topic); err != nil {
		return nil, err
	}
	// The consumers run until ctx ends or the Subscriber closes, or, if starting one of them
	// fails, until the others are stopped here.
	ctx, cancel := context.WithCancel(ctx)
	inputs := make([]<-chan *message.Message, 0, s.config.Consumers)
	for range s.config.Consumers {
		in, err := s.sub.Subscribe(ctx, topic)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("sqltransport: subscribing to %q: %w", topic, err)
		}
		inputs = append(inputs, in)
	}
	s.started(len(inputs), cancel)
	if s.config.Dialect == MySQL {
		s.workers.Add(1)
		go s.purge(ctx, topic)
	}
	if len(inputs) == 1 {
		return inputs[0], nil
	}
	return s.merge(ctx, inputs), nil
}

// started records a subscription's consumers and how to stop them. It keeps an idle connection
// for every running consumer in a pool the Subscriber owns, so that consumers looking every
// PollInterval do not open a new connection each time.
func (s *Subscriber) started(consumers int, cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancels = append(s.cancels, cancel)
	if s.ownsDB {
		s.consumers += consumers
		s.db.SetMaxIdleConns(s.consumers)
	}
}

// merge forwards the consumers' messages to one channel. A message that cannot be passed on
// because the subscription is ending is left unacked, so its row is handed out again later.
func (s *Subscriber) merge(ctx context.Context, inputs []<-chan *message.Message) <-chan *message.Message {
	out := make(chan *message.Message)
	var wg sync.WaitGroup
	for _, in := range inputs {
		wg.Add(1)
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			defer wg.Done()
			for msg := range in {
				select {
				case out <- msg:
				case <-ctx.Done():
				case <-s.closing:
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// purgeInterval is how often a MySQL subscription deletes its topic's acked rows.
const purgeInterval = time.Second

// purge deletes topic's acked rows every purgeInterval while the subscription runs (MySQL only:
// see queueOffsets). Failing to is harmless, and tried again next time.
func (s *Subscriber) purge(ctx context.Context, topic string) {
	defer s.workers.Done()
	ticker := time.NewTicker(purgeInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		case <-ticker.C:
		}
		if _, err := purgeAcked(ctx, s.db, s.tables.names, topic); err != nil && ctx.Err() == nil {
			s.logger.Debug("Deleting acked messages failed; trying again later", watermill.LogFields{"topic": topic, "err": err.Error()})
		}
	}
}

// SubscribeInitialize creates topic's table if it is missing (message.SubscribeInitializer).
func (s *Subscriber) SubscribeInitialize(topic string) error {
	tables := newTableCache(s.db, s.tables.names, false)
	return tables.ensure(context.Background(), topic)
}

// Close stops every consumer, waiting for them to end their batches, then closes the pool if the
// Subscriber opened it. Messages handed out and not yet acked are handed out again later. It is
// safe to call more than once.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		err := s.sub.Close()
		s.mu.Lock()
		for _, cancel := range s.cancels {
			cancel()
		}
		s.mu.Unlock()
		s.workers.Wait()
		if s.ownsDB {
			err = errors.Join(err, s.db.Close())
		}
		s.closeErr = err
	})
	return s.closeErr
}
