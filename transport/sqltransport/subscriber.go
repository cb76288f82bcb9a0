package sqltransport

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/exclusive"
)

// Subscriber consumes topics as queues: every message goes to one consumer, however many
// Subscribers in however many processes consume its topic. Each Subscribe starts
// Config.Consumers consumers. A consumer, in one READ COMMITTED transaction, locks up to
// Config.BatchSize of the oldest rows no other consumer holds (FOR UPDATE SKIP LOCKED), hands
// them out, and deletes the acked ones when all of them were acked (on MySQL: marks them acked,
// and deletes them a second or so later); a nacked message is handed out again after
// Config.ResendInterval. With one consumer it hands out one message at a time, each once the
// previous was acked, in table order; with more, order is not kept anyway, and each consumer
// hands out its whole batch at once, so that a router handles up to Consumers × BatchSize
// messages of the topic at the same time and a batch costs one transaction however long each
// message takes. When it finds nothing it waits Config.PollInterval, or less when a Publisher
// sharing its wakeups (New, Publisher.NewSubscriber) commits rows to the topic.
//
// Acks are therefore committed when the batch ends, not when Ack is called: a process that
// crashes in the middle of a batch leaves its rows in the table, and they are handed out again.
// Delivery is at least once; the timeout manager's satellites are idempotent to that.
type Subscriber struct {
	config Config
	db     *sql.DB
	ownsDB bool
	tables *tableCache
	schema queueSchema
	acks   queueOffsets
	wake   *wakeups
	logger watermill.LoggerAdapter
	pace   backoff

	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	workers   sync.WaitGroup // consumers, purging

	takes  atomic.Int64 // transactions begun to take messages (read by tests)
	probes atomic.Int64 // polls that asked whether anything waits (read by tests)

	mu        sync.Mutex
	consumers int                  // started, to keep that many idle connections in an owned pool
	cancels   []context.CancelFunc // stop the subscriptions' consumers
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber opens a pool on config.DSN (or uses config.DB) and checks that the database
// answers. It fails when the database cannot be reached now. Its consumers find new rows by
// polling; a Subscriber from New or Publisher.NewSubscriber is also woken by its Publisher.
func NewSubscriber(ctx context.Context, config Config, logger watermill.LoggerAdapter) (*Subscriber, error) {
	return newSubscriber(ctx, config, logger, newWakeups())
}

func newSubscriber(ctx context.Context, config Config, logger watermill.LoggerAdapter, wake *wakeups) (*Subscriber, error) {
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
	return &Subscriber{
		config:  config,
		db:      db,
		ownsDB:  owns,
		tables:  newTableCache(db, n, config.SkipSchemaInitialization),
		schema:  queueSchema{names: n, batchSize: config.BatchSize},
		acks:    queueOffsets{names: n},
		wake:    wake,
		logger:  logger,
		pace:    backoff{poll: config.PollInterval, retry: config.RetryInterval},
		closing: make(chan struct{}),
	}, nil
}

// Subscribe starts Config.Consumers consumers on topic's table, creating it first if needed,
// and returns their messages on one channel, which is closed when ctx ends or the Subscriber
// closes and every consumer has ended its batch.
//
// recoverability's deferred queues are consumed by one subscription only (internal/exclusive):
// Subscribe then takes a lock in the database for the topic, on a connection it holds for as long
// as the subscription lasts, and fails with recoverability.ErrDeferredQueueInUse while another
// subscription, in any process, holds it.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, ErrClosed
	default:
	}
	if err := s.tables.ensure(ctx, topic); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	if exclusive.Requested(ctx) {
		if err := s.holdExclusive(ctx, topic); err != nil {
			cancel()
			return nil, fmt.Errorf("sqltransport: subscribing to %q: %w", topic, err)
		}
	}
	out := make(chan *message.Message)
	var consumers sync.WaitGroup
	for range s.config.Consumers {
		consumers.Add(1)
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			defer consumers.Done()
			s.consume(ctx, topic, out)
		}()
	}
	s.workers.Add(1) // so that the channel is closed when Close returns
	go func() {
		defer s.workers.Done()
		consumers.Wait()
		close(out)
	}()
	s.started(s.config.Consumers, cancel)
	if s.config.Dialect == MySQL {
		s.workers.Add(1)
		go s.purge(ctx, topic)
	}
	return out, nil
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

// consume takes batches from topic's table until ctx ends or the Subscriber closes: at once
// after a full batch or one that left rows behind, after PollInterval (or a wake-up) when the
// table had no more, after RetryInterval when the database failed.
//
// A batch smaller than BatchSize, all acked, took everything the look could see, so the consumer
// sleeps rather than look again: rows committed since the look wake it (the mark), and rows that
// other consumers held and give back are found at the next poll. The poll is the topic's: every
// PollInterval it wakes the consumer asleep the longest, so that however many consumers sleep on
// a topic, one asks. A consumer woken by a commit takes at once; one woken by the poll asks first
// whether anything waits, in one statement, before it takes the three round trips of a
// transaction, as most polls of an idle queue find nothing. A message published to idle
// consumers so costs one transaction.
func (s *Subscriber) consume(ctx context.Context, topic string, out chan<- *message.Message) {
	logger := s.logger.With(watermill.LogFields{"topic": topic})
	polled := false // looking because PollInterval passed, not because of a commit
	for {
		if s.stopped(ctx) {
			return
		}
		mark := s.wake.mark(topic) // before the look: rows committed after it wake us
		var (
			more bool
			err  error
		)
		if !polled || s.anyWaiting(ctx, topic) {
			more, err = s.take(ctx, topic, out, logger)
		}
		if s.stopped(ctx) {
			return
		}
		polled = false
		wait := s.pace.HandleError(logger, !more, err)
		if wait <= 0 {
			continue
		}
		if err != nil {
			// A failing database is retried at its pace, not at every publish.
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-s.closing:
			case <-timer.C:
			}
			timer.Stop()
			continue
		}
		sleeper, leave := s.wake.sleep(topic, mark, wait)
		looking := true
		select {
		case <-ctx.Done():
			looking = false
		case <-s.closing:
			looking = false
		case <-sleeper.woken:
			polled = sleeper.polled
		}
		leave(looking)
	}
}

func (s *Subscriber) stopped(ctx context.Context) bool {
	select {
	case <-s.closing:
		return true
	default:
		return ctx.Err() != nil
	}
}

// finishTimeout bounds deleting a batch's acked rows and committing, which go on after the
// subscription was stopped: the messages were handled, and should not be handed out again.
const finishTimeout = 30 * time.Second

// row is a message a consumer locked, and its offset.
type row struct {
	offset int64
	msg    *message.Message
}

// take locks a batch of topic's rows, hands their messages out, and deletes (MySQL: marks) the
// acked ones in the same transaction. It reports whether more may wait: it locked a full batch,
// or left rows in the table.
func (s *Subscriber) take(ctx context.Context, topic string, out chan<- *message.Message, logger watermill.LoggerAdapter) (more bool, err error) {
	// The transaction is not tied to ctx, which database/sql would roll it back with: when the
	// subscription stops in the middle of a batch, the acked messages are still deleted.
	txCtx := context.WithoutCancel(ctx)
	s.takes.Add(1)
	tx, err := s.db.BeginTx(txCtx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return false, fmt.Errorf("beginning a transaction to take messages: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	batch, err := s.lock(ctx, tx, topic)
	if err != nil || len(batch) == 0 {
		return false, err
	}
	if len(batch) == s.config.BatchSize {
		// More may wait: wake another consumer to take the next batch while this one is handed
		// out, as a commit wakes only one.
		s.wake.wakeOne(topic, false)
	}

	acked := make([]bool, len(batch))
	if s.config.Consumers == 1 {
		for i, r := range batch {
			if acked[i] = s.handOut(ctx, r.msg, out, logger); !acked[i] {
				break
			}
		}
	} else {
		var wg sync.WaitGroup
		for i, r := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acked[i] = s.handOut(ctx, r.msg, out, logger)
			}()
		}
		wg.Wait()
	}
	var offsets []int64
	for i, r := range batch {
		if acked[i] {
			offsets = append(offsets, r.offset)
		}
	}
	if len(offsets) == 0 {
		return true, nil // rolled back: every row is handed out again
	}
	finishCtx, cancel := context.WithTimeout(txCtx, finishTimeout)
	defer cancel()
	query, args := s.acks.ackQuery(topic, offsets)
	if _, err := tx.ExecContext(finishCtx, query, args...); err != nil {
		return true, fmt.Errorf("ending %d acked messages: %w", len(offsets), err)
	}
	committed = true // a failed commit rolls back by itself
	if err := tx.Commit(); err != nil {
		return true, fmt.Errorf("committing %d acked messages: %w", len(offsets), err)
	}
	return len(batch) == s.config.BatchSize || len(offsets) < len(batch), nil
}

// anyWaiting reports whether topic's table may hold a message to take: a row not acked, which
// another consumer may hold. When the question itself fails it says yes, so that take meets the
// failure and it is handled (and retried) there.
func (s *Subscriber) anyWaiting(ctx context.Context, topic string) bool {
	s.probes.Add(1)
	var one int
	err := s.db.QueryRowContext(ctx, s.schema.probeQuery(topic)).Scan(&one)
	return !errors.Is(err, sql.ErrNoRows)
}

// lock selects and locks up to BatchSize of the oldest rows no other consumer holds.
func (s *Subscriber) lock(ctx context.Context, tx *sql.Tx, topic string) ([]row, error) {
	rows, err := tx.QueryContext(ctx, s.schema.selectQuery(topic))
	if err != nil {
		return nil, fmt.Errorf("taking messages: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var batch []row
	for rows.Next() {
		var (
			r                       row
			uuid, payload, metadata []byte
		)
		if err := rows.Scan(&r.offset, &uuid, &payload, &metadata); err != nil {
			return nil, fmt.Errorf("reading a message row: %w", err)
		}
		r.msg = message.NewMessage(string(uuid), payload)
		r.msg.Metadata = decodeMetadata(metadata)
		batch = append(batch, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("taking messages: %w", err)
	}
	return batch, nil
}

// handOut sends msg on out and waits for its ack. After a nack it waits ResendInterval, then,
// with one consumer (in order), sends a copy again; with several (whole batches at once) it gives
// the message back: its row stays in the table for a later batch, so that the acked rest of its
// batch is deleted and committed now rather than after the nacked one's AckDeadline. It returns
// false when the message was not acked (within AckDeadline), or the subscription stopped first.
func (s *Subscriber) handOut(ctx context.Context, msg *message.Message, out chan<- *message.Message, logger watermill.LoggerAdapter) bool {
	msgCtx, cancel := ctx, context.CancelFunc(func() {})
	if s.config.AckDeadline > 0 {
		msgCtx, cancel = context.WithTimeout(ctx, s.config.AckDeadline)
	}
	defer cancel()
	for {
		msg.SetContext(msgCtx)
		select {
		case out <- msg:
		case <-s.closing:
			return false
		case <-msgCtx.Done():
			return false
		}
		select {
		case <-msg.Acked():
			return true
		case <-msg.Nacked():
		case <-s.closing:
			return isAcked(msg) // acked just before the stop: still deleted
		case <-msgCtx.Done():
			if isAcked(msg) {
				return true
			}
			if ctx.Err() == nil {
				logger.Info("Message not acked in time; it is handed out again later", watermill.LogFields{"msg_uuid": msg.UUID})
			}
			return false
		}
		msg = msg.Copy()
		if s.config.ResendInterval > 0 {
			timer := time.NewTimer(s.config.ResendInterval)
			select {
			case <-timer.C:
			case <-s.closing:
				timer.Stop()
				return false
			case <-msgCtx.Done():
				timer.Stop()
				return false
			}
		}
		if s.config.Consumers > 1 {
			return false
		}
	}
}

func isAcked(msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	default:
		return false
	}
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

// Close stops every consumer, waiting for them to end their batches (deleting the messages acked
// so far), then closes the pool if the Subscriber opened it. Messages handed out and not yet
// acked are handed out again later. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.mu.Lock()
		for _, cancel := range s.cancels {
			cancel()
		}
		s.mu.Unlock()
		s.workers.Wait()
		var err error
		if s.ownsDB {
			err = errors.Join(err, s.db.Close())
		}
		s.closeErr = err
	})
	return s.closeErr
}
