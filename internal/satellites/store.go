package satellites

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/batcher"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/errorqueue"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// StoreConfig configures the store satellite.
type StoreConfig struct {
	// Endpoint whose Timeouts queue the satellite consumes. Required.
	Endpoint string
	// Store keeps the timeouts. Required.
	Store persistence.Store
	// ErrorQueue receives messages that can never be stored. Required.
	ErrorQueue *errorqueue.Queue
	// Breaker watches storage failures (TimeToTriggerStoreCircuitBreaker). Required.
	Breaker *breaker.CircuitBreaker
	// OnStored is told the due time of each newly stored timeout, so the poller can wake early.
	// Optional.
	OnStored func(due time.Time)
	// MaxBatch bounds the delayed messages stored together. Batches form when several are handled
	// at once (several consumers). Defaults to DefaultMaxBatch; 1 makes every batch a batch of one.
	MaxBatch int
	// Now reads the store's clock: relative delays count from it. Defaults to time.Now.
	Now func() time.Time
}

// Validate reports the first missing setting.
func (c StoreConfig) Validate() error {
	if err := wireparse.ValidateName("endpoint", c.Endpoint); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: store satellite needs a Store", ErrInvalidConfig)
	case c.ErrorQueue == nil:
		return fmt.Errorf("%w: store satellite needs an ErrorQueue", ErrInvalidConfig)
	case c.Breaker == nil:
		return fmt.Errorf("%w: store satellite needs a Breaker", ErrInvalidConfig)
	case c.MaxBatch < 0:
		return fmt.Errorf("%w: MaxBatch must not be negative, got %d", ErrInvalidConfig, c.MaxBatch)
	}
	return nil
}

// Store is the satellite on an endpoint's Timeouts queue. It validates each delayed message and
// persists it idempotently by message UUID. It acks only after the store committed. A message that
// can never be stored goes to the error queue with a failure reason.
type Store struct {
	cfg     StoreConfig
	queue   string
	logger  watermill.LoggerAdapter
	calls   persistence.BatchStore // the store's batch calls, or their fallback
	batcher *batcher.Batcher[delayed]
}

var _ Satellite = (*Store)(nil)

// NewStore returns the store satellite.
func NewStore(cfg StoreConfig, logger watermill.LoggerAdapter) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	queue := wire.TimeoutsQueue(cfg.Endpoint)
	s := &Store{cfg: cfg, queue: queue, logger: loggerOrNop(logger).With(watermill.LogFields{"queue": queue}),
		calls: guardedCalls{batchCalls(cfg.Store), cfg.Breaker}}
	var err error
	s.batcher, err = batcher.New(batcher.Config{Max: cfg.MaxBatch, MaxBatchers: maxBatchers, MinParallel: minParallelBatch}, s.store)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Name is the router handler's name.
func (s *Store) Name() string { return s.queue }

// Queue is the endpoint's Timeouts queue.
func (s *Store) Queue() string { return s.queue }

// Handle stores one delayed message.
func (s *Store) Handle(msg *message.Message) error {
	t, err := s.timeoutOf(msg)
	if err != nil {
		return s.reject(msg, err.Error())
	}
	if t.Key != "" {
		return s.scheduleKeyed(msg, t)
	}
	return s.batcher.Do(delayed{msg: msg, t: t})[0]
}

// delayed is a message for the Timeouts queue and the timeout read from it.
type delayed struct {
	msg *message.Message
	t   persistence.Timeout
}

// store stores the timeouts of batch with one StoreMany. It is the one path of every delayed
// message: a lone message is a batch of one. If a batch of many fails, each is stored alone. So an
// invalid timeout, an outage and the breaker are met message by message.
func (s *Store) store(batch []*batcher.Request[delayed]) {
	first, again := batcher.FirstOfEach(batch, func(x delayed) string { return x.t.ID })
	if len(again) > 0 {
		defer s.store(again) // they find their timeout stored
	}
	ts := make([]persistence.Timeout, len(first))
	for i, r := range first {
		ts[i] = r.Item.t
	}
	// A store that started runs to its end, even while the router shuts down. The Pub/Sub may count
	// the message as handed over already.
	ctx, cancel := detached(first[0].Item.msg)
	defer cancel()
	inserted, err := s.calls.StoreMany(ctx, ts)
	if err != nil && len(first) > 1 {
		s.logger.Debug("Storing a batch of timeouts failed; storing them one by one", watermill.LogFields{"count": len(ts), "error": err.Error()})
		batcher.EachAlone(first, s.store)
		return
	}
	if err != nil {
		r := first[0]
		if errors.Is(err, persistence.ErrInvalidTimeout) {
			r.Finish(s.reject(r.Item.msg, err.Error()))
			return
		}
		s.logger.Error("Storing timeout failed; will retry", err, watermill.LogFields{"timeout_id": r.Item.t.ID})
		s.cfg.Breaker.Failure(ctx, err)
		r.Finish(fmt.Errorf("storing timeout %s: %w", r.Item.t.ID, err))
		return
	}
	s.cfg.Breaker.Success()
	isNew := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		isNew[id] = true
	}
	for _, r := range first {
		if isNew[r.Item.t.ID] {
			s.logger.Debug("Timeout stored", watermill.LogFields{"timeout_id": r.Item.t.ID, "destination": r.Item.t.Destination, "due": r.Item.t.Due})
			if s.cfg.OnStored != nil {
				s.cfg.OnStored(r.Item.t.Due)
			}
			r.Finish(nil)
			continue
		}
		r.Finish(s.checkDuplicate(r.Item.msg, r.Item.t))
	}
}

// scheduleKeyed stores a timeout with a deduplication key, alone. Scheduler.Schedule resolves the
// key against the pending timeout that holds it. The message's wire.HeaderKeyPolicy says how.
func (s *Store) scheduleKeyed(msg *message.Message, t persistence.Timeout) error {
	sch, ok := s.cfg.Store.(persistence.Scheduler)
	if !ok {
		return s.reject(msg, fmt.Sprintf("%s is set, but the store (%T) cannot deduplicate by key: it does not implement persistence.Scheduler",
			wire.HeaderKey, s.cfg.Store))
	}
	_, policy, _ := wireparse.Key(msg.Metadata) // checked by timeoutOf
	ctx, cancel := detached(msg)
	defer cancel()
	res, err := guarded(ctx, s.cfg.Breaker, func(ctx context.Context) (persistence.Scheduled, error) {
		return sch.Schedule(ctx, t, s.cfg.Now(), policy)
	})
	if errors.Is(err, persistence.ErrInvalidTimeout) {
		return s.reject(msg, err.Error())
	}
	if err != nil {
		s.logger.Error("Storing timeout failed; will retry", err, watermill.LogFields{"timeout_id": t.ID})
		s.cfg.Breaker.Failure(ctx, err)
		return fmt.Errorf("storing timeout %s: %w", t.ID, err)
	}
	s.cfg.Breaker.Success()
	switch res.Outcome {
	case persistence.Existed:
		return s.checkDuplicate(msg, t)
	case persistence.Duplicate:
		s.logger.Info("Timeout dropped: a pending timeout holds its key", watermill.LogFields{
			"timeout_id": t.ID, "key": t.Key, "pending_id": res.ID})
		return nil
	}
	s.logger.Debug("Timeout stored", watermill.LogFields{"timeout_id": t.ID, "destination": t.Destination, "due": t.Due,
		"key": t.Key, "outcome": res.Outcome.String()})
	if s.cfg.OnStored != nil {
		s.cfg.OnStored(t.Due)
	}
	return nil
}

// timeoutOf reads a delayed message into a Timeout, or says why it cannot be stored.
func (s *Store) timeoutOf(msg *message.Message) (persistence.Timeout, error) {
	due, delayed, err := wireparse.Due(msg.Metadata, s.cfg.Now())
	if err != nil {
		return persistence.Timeout{}, err
	}
	if !delayed {
		return persistence.Timeout{}, fmt.Errorf("%w: neither %s nor %s is set", wire.ErrInvalidHeader, wire.HeaderExpire, wire.HeaderWatermillDelayedUntil)
	}
	if due.Before(persistence.MinDue) {
		due = persistence.MinDue // long past is simply due: deliver at once
	}
	dest, err := wireparse.Destination(msg.Metadata)
	if err != nil {
		return persistence.Timeout{}, err
	}
	key, _, err := wireparse.Key(msg.Metadata)
	if err != nil {
		return persistence.Timeout{}, err
	}
	id := msg.UUID
	if id == "" {
		// A producer that is not Watermill (a plain AMQP client) may send no UUID. The message
		// still gets delivered, under an id of its own. Only its redelivery cannot be recognised.
		id = watermill.NewUUID()
		msg.UUID = id
		s.logger.Info("Delayed message has no UUID; assigned one", watermill.LogFields{"timeout_id": id})
	}
	return persistence.Timeout{
		ID:          id,
		Destination: dest,
		Due:         due,
		Owner:       msg.Metadata.Get(wire.HeaderOwner),
		Key:         key,
		Payload:     msg.Payload,
		Metadata:    withoutRoutingHeaders(msg.Metadata, wireparse.IsRoutingHeader),
	}, nil
}

// checkDuplicate handles a message whose id is stored already. A redelivery is acked. A different
// message reusing the id goes to the error queue, rather than replace or vanish.
func (s *Store) checkDuplicate(msg *message.Message, t persistence.Timeout) error {
	existing, err := guarded(messageContext(msg), s.cfg.Breaker, func(ctx context.Context) (persistence.Timeout, error) {
		return s.cfg.Store.Peek(ctx, t.ID)
	})
	if errors.Is(err, persistence.ErrNotFound) {
		// Stored, then dispatched or cancelled since: this was a late redelivery.
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking stored timeout %s: %w", t.ID, err)
	}
	if existing.Destination == t.Destination && existing.Due.Equal(t.Due) {
		s.logger.Debug("Timeout stored already; redelivery acked", watermill.LogFields{"timeout_id": t.ID})
		return nil
	}
	return s.reject(msg, fmt.Sprintf(
		"a timeout with id %s is already scheduled for %q at %s; this message for %q at %s reuses its UUID and cannot be stored (give each delayed message its own UUID)",
		t.ID, existing.Destination, wireparse.FormatExpire(existing.Due), t.Destination, wireparse.FormatExpire(t.Due)))
}

func (s *Store) reject(msg *message.Message, reason string) error {
	s.logger.Error("Delayed message cannot be stored; moving it to the error queue", errors.New(reason),
		watermill.LogFields{"message_uuid": msg.UUID, "error_queue": s.cfg.ErrorQueue.Topic()})
	return s.cfg.ErrorQueue.Send(msg, errorqueue.Failure{Reason: reason, Queue: s.queue, Handler: s.Name()})
}
