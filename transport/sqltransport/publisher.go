package sqltransport

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("sqltransport: closed")

// Publisher publishes Watermill messages as rows of their topic's table, through watermill-sql's
// Publisher. One Publish call inserts its messages in one statement, in order, and returns once
// they are committed: from then on they survive a crash of either side, and a consumer can take
// them. The table is created before the first publish to a topic unless
// Config.SkipSchemaInitialization is set, so a message is never published into the void.
type Publisher struct {
	config Config
	db     *sql.DB
	ownsDB bool
	schema queueSchema
	tables *tableCache
	pub    *wsql.Publisher
	wake   *wakeups // consumers in this process sharing it look at once after a publish

	// mu keeps Close from racing with Publish: watermill-sql's Publisher reads and writes its
	// closed flag without synchronisation.
	mu     sync.RWMutex
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher opens a pool on config.DSN (or uses config.DB) and checks that the database
// answers. It fails when the database cannot be reached now.
func NewPublisher(ctx context.Context, config Config, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	db, owns, err := openDB(ctx, config, "publisher", config.MaxOpenConns)
	if err != nil {
		return nil, err
	}
	p, err := newPublisher(db, owns, config, loggerOrNop(logger), newWakeups())
	if err != nil && owns {
		_ = db.Close()
	}
	return p, err
}

func newPublisher(db *sql.DB, owns bool, config Config, logger watermill.LoggerAdapter, wake *wakeups) (*Publisher, error) {
	n := config.names()
	schema := queueSchema{names: n, batchSize: config.BatchSize}
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
	if err != nil {
		return nil, fmt.Errorf("sqltransport: %w", err)
	}
	return &Publisher{
		config: config,
		db:     db,
		ownsDB: owns,
		schema: schema,
		tables: newTableCache(db, n, config.SkipSchemaInitialization),
		pub:    pub,
		wake:   wake,
	}, nil
}

// Publish inserts messages into topic's table in one statement, creating the table first if
// this Publisher has not seen it yet. The first message's context bounds the call.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	if len(messages) == 0 {
		return validateTopic(topic)
	}
	if err := p.tables.ensure(messages[0].Context(), topic); err != nil {
		return err
	}
	if err := p.pub.Publish(topic, messages...); err != nil {
		return fmt.Errorf("sqltransport: publishing %d message(s) to %q: %w", len(messages), topic, err)
	}
	p.wake.notify(topic)
	return nil
}

// NewSubscriber returns a Subscriber as NewSubscriber does, whose idle consumers this Publisher
// (and an ExactlyOnceForwarder on it) wakes when it commits rows to their topic, so that they
// take them at once rather than at their next poll: for consumers in the same process as the
// producer, the timeout manager's dispatch satellite for instance. New returns a pair linked so.
// Rows that other processes write are found by polling, as always.
func (p *Publisher) NewSubscriber(ctx context.Context, config Config, logger watermill.LoggerAdapter) (*Subscriber, error) {
	return newSubscriber(ctx, config, logger, p.wake)
}

// DeclareEndpoint creates the tables of endpoint's timeout manager queues, Endpoint.Timeouts and
// Endpoint.TimeoutsDispatcher, and of the error queue ("" means wire.DefaultErrorQueue): the
// installers. Tables that exist are left as they are, so it is idempotent.
func (p *Publisher) DeclareEndpoint(ctx context.Context, endpoint, errorQueue string) error {
	if err := wireparse.ValidateName("endpoint", endpoint); err != nil {
		return fmt.Errorf("sqltransport: %w", err)
	}
	if errorQueue == "" {
		errorQueue = wire.DefaultErrorQueue
	}
	return p.DeclareQueues(ctx, wire.TimeoutsQueue(endpoint), wire.DispatcherQueue(endpoint), errorQueue)
}

// DeclareQueues makes sure each topic's table exists, as Publish does before its first message
// to a topic, even when Config.SkipSchemaInitialization is set (it is how an operator sets up).
func (p *Publisher) DeclareQueues(ctx context.Context, topics ...string) error {
	tables := newTableCache(p.db, p.schema.names, false)
	return tables.ensure(ctx, topics...)
}

// Table returns the name of topic's table, as SQL quotes it, for an operator's queries or a
// producer that writes rows itself.
func (p *Publisher) Table(topic string) (string, error) {
	if err := validateTopic(topic); err != nil {
		return "", err
	}
	return p.schema.quoted(topic), nil
}

// dialect is the database the Publisher writes to.
func (p *Publisher) dialect() Dialect { return p.config.Dialect }

// Close waits for publishes in flight, then closes the pool if the Publisher opened it. Publish
// fails with ErrClosed afterwards. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	err := p.pub.Close()
	if p.ownsDB {
		err = errors.Join(err, p.db.Close())
	}
	return err
}
