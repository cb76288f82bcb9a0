package timeouts

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ErrNotReady is returned by Schedule when the manager stopped before its store was set up, and
// by ScheduleTx called before Ready.
var ErrNotReady = errors.New("timeouts: the manager is not ready")

// maxListLimit bounds persistence.ListOptions.Limit in Manager.List.
const maxListLimit = 10_000

// WithKey marks a delayed message with a deduplication key (at most 250 bytes; "order-42/payment",
// say). While a pending timeout holds the key, the message replaces it or is dropped. With
// persistence.KeyReplace the last one wins (a debounce). With persistence.KeyKeep the first one
// wins. It works through Manager.Schedule and ScheduleTx and through the Timeouts queue
// (Publisher). A message already due when published is delivered at once and deduplicates
// nothing.
func WithKey(msg *message.Message, key string, policy persistence.KeyPolicy) {
	msg.Metadata.Set(wire.HeaderKey, key)
	switch policy {
	case persistence.KeyKeep:
		msg.Metadata.Set(wire.HeaderKeyPolicy, wire.KeyPolicyKeep)
	default:
		msg.Metadata.Set(wire.HeaderKeyPolicy, wire.KeyPolicyReplace)
	}
}

// Schedule stores msg as a timeout to be delivered to topic when due (DeliverAt, DeliverAfter).
// A message without a due time is due now. Schedule returns once the timeout is durable. A
// Cancel, Reschedule or Get called after it sees the timeout, on every store. The timeout's id
// is the message's UUID. A message marked WithKey is deduplicated against the pending timeout
// holding its key. The result says what was done. Scheduling a UUID that is stored already
// changes nothing (persistence.Existed).
//
// Schedule is the way to delay a message from the process that runs the manager. Producers in
// other processes, and in other languages, publish to the Timeouts queue instead (Publisher,
// NewPublisher, or the wire contract). Such a message is stored when the manager handles it. So
// a Cancel that follows its Publish may find nothing yet.
//
// Schedule waits for the manager to be Ready (its store set up by the router's start).
func (m *Manager) Schedule(ctx context.Context, topic string, msg *message.Message) (persistence.Scheduled, error) {
	return m.schedule(ctx, topic, msg, func(ctx context.Context, t persistence.Timeout, now time.Time, policy persistence.KeyPolicy) (persistence.Scheduled, error) {
		if sch, ok := m.cfg.Store.(persistence.Scheduler); ok {
			return sch.Schedule(ctx, t, now, policy)
		}
		if t.Key != "" {
			return persistence.Scheduled{}, fmt.Errorf("%w: the store (%T) cannot deduplicate by key: it does not implement persistence.Scheduler",
				persistence.ErrUnsupported, m.cfg.Store)
		}
		inserted, err := m.cfg.Store.Store(ctx, t)
		if err != nil || !inserted {
			return persistence.Scheduled{ID: t.ID, Outcome: persistence.Existed}, err
		}
		return persistence.Scheduled{ID: t.ID, Outcome: persistence.Created}, nil
	})
}

// ScheduleTx is Schedule inside the caller's transaction tx, on a database the store keeps its
// table in. The timeout exists if and only if tx commits. So a business change and its timeout
// commit together or not at all (a transactional outbox for timeouts). It needs a store that
// implements persistence.TxScheduler (PostgreSQL, MySQL/MariaDB, SQLite, SQL Server). It
// returns persistence.ErrUnsupported otherwise.
//
// Call it once the manager is Ready (its store's tables exist). It does not wait, since a
// transaction the caller holds could keep the store from being set up. Before Ready it returns
// ErrNotReady. The poller finds the timeout at its due time once tx has committed. One due
// before the commit is found at the commit's next poll (Config.PollInterval at the latest).
func (m *Manager) ScheduleTx(ctx context.Context, tx *sql.Tx, topic string, msg *message.Message) (persistence.Scheduled, error) {
	if tx == nil {
		return persistence.Scheduled{}, fmt.Errorf("%w: ScheduleTx needs a transaction, got nil", persistence.ErrInvalidTimeout)
	}
	select {
	case <-m.ready:
	default:
		return persistence.Scheduled{}, fmt.Errorf("%w: ScheduleTx before Ready (the store may have no tables yet)", ErrNotReady)
	}
	txs, ok := m.cfg.Store.(persistence.TxScheduler)
	if !ok {
		return persistence.Scheduled{}, fmt.Errorf("%w: the store (%T) cannot schedule in a transaction: it does not implement persistence.TxScheduler",
			persistence.ErrUnsupported, m.cfg.Store)
	}
	return m.schedule(ctx, topic, msg, func(ctx context.Context, t persistence.Timeout, now time.Time, policy persistence.KeyPolicy) (persistence.Scheduled, error) {
		res, err := txs.ScheduleTx(ctx, tx, t, now, policy)
		if err == nil && res.ID == t.ID && res.Outcome != persistence.Existed {
			m.wakeAt(t.Due) // the poller cannot see it before the commit
		}
		return res, err
	})
}

type scheduleFunc func(ctx context.Context, t persistence.Timeout, now time.Time, policy persistence.KeyPolicy) (persistence.Scheduled, error)

func (m *Manager) schedule(ctx context.Context, topic string, msg *message.Message, do scheduleFunc) (persistence.Scheduled, error) {
	if msg == nil {
		return persistence.Scheduled{}, fmt.Errorf("%w: the message is nil", persistence.ErrInvalidTimeout)
	}
	now := m.clock.Now()
	t, policy, err := timeoutOf(topic, msg, now)
	if err != nil {
		return persistence.Scheduled{}, fmt.Errorf("scheduling message %s for %q: %w", msg.UUID, topic, err)
	}
	injectTrace(ctx, t.Metadata) // the caller's trace, when the message brought none
	if err := m.waitReady(ctx); err != nil {
		return persistence.Scheduled{}, err
	}
	callCtx, cancel := m.bounded(ctx)
	res, err := do(callCtx, t, now, policy)
	cancel()
	if err != nil {
		return persistence.Scheduled{}, fmt.Errorf("scheduling message %s for %q: %w", msg.UUID, topic, err)
	}
	fields := watermill.LogFields{"timeout_id": res.ID, "destination": t.Destination, "due": t.Due, "outcome": res.Outcome.String()}
	if t.Key != "" {
		fields["key"] = t.Key
	}
	m.logger.Debug("Timeout scheduled", fields)
	m.tracing.scheduled(ctx, t, res.Outcome.String())
	if res.ID == t.ID && (res.Outcome == persistence.Created || res.Outcome == persistence.Replaced) {
		m.metrics.onStored()
		m.poller.wake(t.Due)
	}
	return res, nil
}

// timeoutOf reads msg into the timeout Schedule stores, with its key policy.
func timeoutOf(topic string, msg *message.Message, now time.Time) (persistence.Timeout, persistence.KeyPolicy, error) {
	dest, err := wireparse.Destination(map[string]string{wire.HeaderDestination: topic})
	if err != nil {
		return persistence.Timeout{}, 0, err
	}
	due, delayed, err := wireparse.Due(msg.Metadata, now)
	if err != nil {
		return persistence.Timeout{}, 0, err
	}
	if !delayed {
		due = wireparse.RoundUp(now)
	}
	if due.Before(persistence.MinDue) {
		due = persistence.MinDue // long past is simply due: deliver at once
	}
	key, policy, err := wireparse.Key(msg.Metadata)
	if err != nil {
		return persistence.Timeout{}, 0, err
	}
	id := msg.UUID
	if id == "" {
		return persistence.Timeout{}, 0, fmt.Errorf("%w: the message has no UUID (it is the timeout's id)", persistence.ErrInvalidTimeout)
	}
	metadata := make(map[string]string, len(msg.Metadata)+2)
	for k, v := range msg.Metadata {
		if !wireparse.IsRoutingHeader(k) {
			metadata[k] = v
		}
	}
	injectTrace(msg.Context(), metadata)
	t := persistence.Timeout{
		ID: id, Destination: dest, Due: due, Owner: msg.Metadata.Get(wire.HeaderOwner), Key: key,
		Payload: msg.Payload, Metadata: metadata,
	}
	return t, policy, t.Validate()
}

// bounded is ctx bounded by Config.CallTimeout when it has no deadline of its own. So a
// steering call on a store that stopped answering fails rather than hangs.
func (m *Manager) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, cmp.Or(m.cfg.CallTimeout, breaker.DefaultCallTimeout))
}

// waitReady waits until the store is set up, the manager stopped, or ctx is done.
func (m *Manager) waitReady(ctx context.Context) error {
	select {
	case <-m.ready:
		return nil
	default:
	}
	select {
	case <-m.ready:
		return nil
	case <-m.done:
		return fmt.Errorf("%w: it stopped before its store was set up", ErrNotReady)
	case <-ctx.Done():
		return fmt.Errorf("waiting for the manager to be ready: %w", ctx.Err())
	}
}

// wakeAt wakes the poller now. For a timeout due before its next regular look, it wakes it at
// due too. A timeout scheduled in a transaction is invisible to a look made before the commit.
func (m *Manager) wakeAt(due time.Time) {
	m.poller.wake(due)
	if wait := due.Sub(m.clock.Now()); wait < m.cfg.PollInterval {
		time.AfterFunc(max(wait, 0)+time.Millisecond, func() { m.poller.wake(due) })
	}
}

// Reschedule moves the due time of a pending timeout to at, keeping its id, message, owner and
// key. A time in the past means now. It returns false, never an error, when the timeout is not
// pending. That is one delivered, cancelled, never stored, or being delivered right now. One
// claimed by the poller is delivered at its old due time. A timeout is never delivered twice
// because of a Reschedule, nor before the due time it was given last.
func (m *Manager) Reschedule(ctx context.Context, id string, at time.Time) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	if at.IsZero() {
		return false, fmt.Errorf("rescheduling timeout %q: %w: the due time is zero", id, persistence.ErrInvalidTimeout)
	}
	sch, ok := m.cfg.Store.(persistence.Scheduler)
	if !ok {
		return false, fmt.Errorf("rescheduling timeout %q: %w: the store (%T) does not implement persistence.Scheduler",
			id, persistence.ErrUnsupported, m.cfg.Store)
	}
	now := m.clock.Now()
	if at.Before(now) {
		at = now
	}
	due := wireparse.RoundUp(at)
	if err := persistence.ValidateDue(due); err != nil {
		return false, fmt.Errorf("rescheduling timeout %q: %w", id, err)
	}
	ctx, cancel := m.bounded(ctx)
	defer cancel()
	ok, err := sch.Reschedule(ctx, id, due, now)
	if err != nil {
		return false, fmt.Errorf("rescheduling timeout %q: %w", id, err)
	}
	if ok {
		m.logger.Debug("Timeout rescheduled", watermill.LogFields{"timeout_id": id, "due": due})
		m.poller.wake(due)
	}
	return ok, nil
}

// Get returns the stored timeout with that id, its message whole. When none is stored
// (delivered, cancelled, or never scheduled), it returns an error wrapping
// persistence.ErrNotFound. A parked timeout has its reason in Parked (see Unpark).
func (m *Manager) Get(ctx context.Context, id string) (persistence.Timeout, error) {
	if err := checkID(id); err != nil {
		return persistence.Timeout{}, err
	}
	ctx, cancel := m.bounded(ctx)
	defer cancel()
	t, err := m.cfg.Store.Peek(ctx, id)
	if err != nil {
		return persistence.Timeout{}, fmt.Errorf("timeout %q: %w", id, err)
	}
	return t, nil
}

// List returns a page of the stored timeouts, earliest due first, without their payloads. It
// lists those matching the filters of opts, after opts.After. Pass the last timeout of the
// previous page as persistence.Position{Due: t.Due, ID: t.ID}. Paging so is stable while
// timeouts come and go.
// opts.Limit defaults to 100 and may be at most 10,000. opts.Parked lists only the parked
// timeouts (see Unpark), each with its reason in Parked.
func (m *Manager) List(ctx context.Context, opts persistence.ListOptions) ([]persistence.Timeout, error) {
	ins, err := m.inspector()
	if err != nil {
		return nil, err
	}
	if opts.Limit > maxListLimit {
		return nil, fmt.Errorf("%w: List's limit %d is above %d", persistence.ErrInvalidTimeout, opts.Limit, maxListLimit)
	}
	if !opts.DueFrom.IsZero() && !opts.DueBefore.IsZero() && !opts.DueFrom.Before(opts.DueBefore) {
		return nil, fmt.Errorf("%w: List's DueFrom %s is not before DueBefore %s", persistence.ErrInvalidTimeout,
			wireparse.FormatExpire(opts.DueFrom), wireparse.FormatExpire(opts.DueBefore))
	}
	list, err := ins.List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing timeouts: %w", err)
	}
	return list, nil
}

// Stats counts the stored timeouts now: pending, due now, claimed, parked, by destination, and
// the earliest and latest due times. It reads the whole table. Call it for people, not in a
// loop.
func (m *Manager) Stats(ctx context.Context) (persistence.Stats, error) {
	ins, err := m.inspector()
	if err != nil {
		return persistence.Stats{}, err
	}
	st, err := ins.Stats(ctx, m.clock.Now())
	if err != nil {
		return persistence.Stats{}, fmt.Errorf("counting timeouts: %w", err)
	}
	return st, nil
}

func (m *Manager) inspector() (persistence.Inspector, error) {
	ins, ok := m.cfg.Store.(persistence.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: the store (%T) does not implement persistence.Inspector", persistence.ErrUnsupported, m.cfg.Store)
	}
	return ins, nil
}

// checkID refuses an id no store can hold.
func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: the timeout id is empty", persistence.ErrInvalidTimeout)
	case len(id) > persistence.MaxIDLength:
		return fmt.Errorf("%w: the timeout id is longer than %d bytes", persistence.ErrInvalidTimeout, persistence.MaxIDLength)
	}
	return nil
}
