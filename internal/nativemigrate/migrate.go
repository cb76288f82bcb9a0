package nativemigrate

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// Defaults of MigrationConfig.
const (
	DefaultBatchSize     = 1000
	DefaultWorkers       = 8
	DefaultRemovers      = 8
	DefaultFinishTimeout = 30 * time.Second
)

// MigrationConfig configures a migration of stored timeouts to the native delay.
type MigrationConfig struct {
	// Store holds the timeouts; it must implement persistence.Handover. Required. Timeout
	// managers may keep running on it.
	Store persistence.Store
	// Target is the native delay the timeouts go to: RabbitMQ(publisher) or NATS(publisher).
	// Required, unless Publisher is set.
	Target Target
	// Publisher, when Target is not set, sends the timeouts through RabbitMQ's delay levels.
	Publisher *rabbitmq.Publisher
	// Cutoff, when set, limits the migration to timeouts due at or after it; earlier ones stay
	// for the timeout manager. Defaults to none: every timeout, those past due sent at once.
	Cutoff time.Time
	// BatchSize is how many timeouts one batch hides, sends and removes. Defaults to 1000.
	BatchSize int
	// Workers is how many batches are in flight at once, each on a channel of the Publisher (give
	// it a ChannelPoolSize of at least Workers). Defaults to 8.
	Workers int
	// Removers is how many Remove calls each batch makes at once, for a store that cannot remove
	// a whole batch in one RemoveMany call. Defaults to 8.
	Removers int
	// SkipUnmigratable lets the migration go ahead when the preflight finds timeouts that cannot
	// be migrated (a missing or unusable destination, a delay too long); they stay in the store
	// and are reported. Defaults to false: the migration stops before changing anything.
	SkipUnmigratable bool
	// FinishTimeout is how long an interrupted migration may take to finish the batches in
	// flight (waiting for confirms, removing what was sent) before it puts the rest back.
	// Defaults to 30 s.
	FinishTimeout time.Duration
	// OnPreflight, when set, is called with the preflight's findings before anything changes.
	OnPreflight func(Preflight)
	// OnProgress, when set, is called after each batch, from one goroutine at a time.
	OnProgress func(Progress)
	// Logger defaults to none.
	Logger watermill.LoggerAdapter
}

func (c *MigrationConfig) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Removers == 0 {
		c.Removers = DefaultRemovers
	}
	if c.FinishTimeout == 0 {
		c.FinishTimeout = DefaultFinishTimeout
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	if c.Target == nil && c.Publisher != nil {
		c.Target = RabbitMQ(c.Publisher)
	}
}

// Validate reports the first missing or impossible setting.
func (c MigrationConfig) Validate() error {
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: Store is required", configerr.ErrInvalidConfig)
	case c.Target == nil:
		return fmt.Errorf("%w: Publisher is required (or Target)", configerr.ErrInvalidConfig)
	case c.BatchSize < 0 || c.Workers < 0 || c.Removers < 0:
		return fmt.Errorf("%w: BatchSize, Workers and Removers must be positive", configerr.ErrInvalidConfig)
	case c.FinishTimeout < 0:
		return fmt.Errorf("%w: FinishTimeout must be positive, got %s", configerr.ErrInvalidConfig, c.FinishTimeout)
	}
	if _, ok := c.Store.(persistence.Handover); !ok {
		return fmt.Errorf("%w: the %T store cannot hand its timeouts over (it does not implement persistence.Handover)", persistence.ErrUnsupported, c.Store)
	}
	return nil
}

func (c MigrationConfig) cutoff() time.Time {
	if c.Cutoff.IsZero() {
		return persistence.MinDue
	}
	return c.Cutoff
}

// Progress is how far a migration has come.
type Progress struct {
	// Total is how many timeouts the preflight counted; timeout managers dispatching and new
	// timeouts arriving meanwhile move the real number.
	Total int
	// Done counts the timeouts handled: migrated or found unmigratable.
	Done     int
	Migrated int
	Elapsed  time.Duration
}

// Unmigratable is a timeout left in the store, and why.
type Unmigratable struct {
	ID, Destination, Reason string
}

// Result is what a migration did.
type Result struct {
	Preflight Preflight
	// Migrated counts timeouts sent through the delay levels (confirmed) and removed.
	Migrated int
	// AlreadyGone counts timeouts sent whose removal found them gone: a timeout manager
	// dispatched them (a lease that ran out while its dispatch was still in flight) or they were
	// cancelled meanwhile. Each may be delivered twice.
	AlreadyGone int
	// Unmigratable lists the timeouts left in the store for the timeout manager.
	Unmigratable []Unmigratable
	// Released counts hidden timeouts put back unsent, for the timeout managers: the
	// unmigratable ones, those not sent because of an interruption or error, and those a stopped
	// migration had hidden that are due before the cutoff.
	Released int
	// NotRemoved lists the ids of timeouts sent but not removed because removing failed: they
	// stay hidden, and a rerun sends them again.
	NotRemoved []string
	Elapsed    time.Duration
}

// Migrate moves the stored timeouts (due at or after the cutoff) to the native delay: after the
// preflight, batches are hidden from the timeout managers running on the store, sent with
// publisher confirms, then removed. See the package documentation ("Migration") for what a crash,
// an interruption and a rerun do. It returns the result so far with any error.
func Migrate(ctx context.Context, config MigrationConfig) (Result, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	pf, err := check(ctx, config)
	if err != nil {
		return Result{}, err
	}
	if config.OnPreflight != nil {
		config.OnPreflight(pf)
	}
	if err := pf.Err(config.SkipUnmigratable); err != nil {
		return Result{Preflight: pf}, err
	}
	mark, err := newMark()
	if err != nil {
		return Result{Preflight: pf}, err
	}
	m := &migration{
		cfg:     config,
		handing: config.Store.(persistence.Handover),
		mark:    mark,
		start:   start,
		total:   pf.Survey.Count,
		result:  Result{Preflight: pf},
		dests:   map[string]string{},
	}
	for d := range pf.MissingDestinations {
		m.dests[d] = "destination queue " + d + " does not exist"
	}
	for d, err := range pf.InvalidDestinations {
		m.dests[d] = err.Error()
	}
	if pf.Survey.Hidden > 0 {
		config.Logger.Info("Resuming: timeouts hidden by an earlier migration that stopped are sent again", watermill.LogFields{"hidden": pf.Survey.Hidden})
	}
	err = m.run(ctx)
	m.result.Elapsed = time.Since(start)
	return m.result, err
}

// newMark picks the time this migration hides its timeouts until: random, so that a rerun tells
// its own hidden timeouts from those of a migration that stopped.
func newMark() (time.Time, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return time.Time{}, fmt.Errorf("rabbitmq: choosing a mark: %w", err)
	}
	// Within the century after HiddenFrom: well inside the range every store keeps.
	const span = 100 * 365 * 24 * time.Hour
	offset := time.Duration(binary.BigEndian.Uint64(b[:]) % uint64(span/time.Microsecond))
	return persistence.HiddenFrom.Add(offset * time.Microsecond), nil
}

type migration struct {
	cfg     MigrationConfig
	handing persistence.Handover
	mark    time.Time
	start   time.Time
	total   int

	mu     sync.Mutex
	result Result
	done   int
	held   map[string]struct{} // unmigratable timeouts, hidden until the end
	dests  map[string]string   // destinations that cannot be migrated to, and why
	known  map[string]bool     // destinations found to exist
}

func (m *migration) run(ctx context.Context) error {
	// Batches in flight finish on work, which outlives ctx by FinishTimeout, so that an
	// interruption does not leave messages sent but their timeouts not removed. hiding ends
	// with ctx, or when a worker fails.
	work, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
			timer := time.AfterFunc(m.cfg.FinishTimeout, stop)
			<-work.Done()
			timer.Stop()
		case <-work.Done():
		}
	}()
	hiding, stopHiding := context.WithCancel(ctx)
	defer stopHiding()

	errs := make(chan error, m.cfg.Workers)
	var wg sync.WaitGroup
	for range m.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.worker(hiding, work)
			if err != nil {
				stopHiding()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	var err error
	for e := range errs {
		if e != nil && err == nil {
			err = e
		}
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("rabbitmq: migration interrupted: %w", ctx.Err())
	}
	// Unmigratable timeouts go back to the timeout managers, whatever happened.
	if rerr := m.releaseHeld(context.WithoutCancel(ctx)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// worker hides, sends and removes batches until none is left, hiding ends, or a batch fails. A
// Hide runs on work: once asked, it completes, so that no timeout is hidden without the
// migration knowing it.
func (m *migration) worker(hiding, work context.Context) error {
	for hiding.Err() == nil {
		start := time.Now()
		batch, err := m.handing.Hide(work, start, m.cfg.cutoff(), m.cfg.BatchSize, m.mark)
		if err != nil {
			return fmt.Errorf("rabbitmq: hiding a batch: %w", err)
		}
		if len(batch) == 0 {
			return nil
		}
		hidden := time.Since(start)
		if err := m.migrate(work, batch); err != nil {
			return err
		}
		m.cfg.Logger.Debug("Batch migrated", watermill.LogFields{"timeouts": len(batch), "hide": hidden, "total": time.Since(start)})
	}
	return nil
}

// migrate sends a hidden batch and removes what the broker took. Whatever it could not send it
// puts back: the unmigratable at the end of the run, the rest at once.
func (m *migration) migrate(ctx context.Context, batch []persistence.Timeout) error {
	now := time.Now()
	var (
		sendable  []Item
		sent      []persistence.Timeout
		putBack   []string
		unsent    []string
		unsentErr error
	)
	for _, t := range batch {
		if t.Due.Before(m.cfg.cutoff()) {
			// Hidden by a migration that stopped, and due before this one's cutoff: back to the
			// timeout managers.
			putBack = append(putBack, t.ID)
			continue
		}
		if reason := m.destinationProblem(ctx, t.Destination); reason != "" {
			m.unmigratable(t, reason)
			continue
		}
		msg := message.NewMessage(t.ID, t.Payload)
		msg.Metadata = t.Metadata
		sendable = append(sendable, Item{Destination: t.Destination, Due: t.Due, Message: msg})
		sent = append(sent, t)
	}
	results, sendErr := m.cfg.Target.Send(ctx, now, sendable)
	sentAt := time.Now()
	confirmed := make([]persistence.Timeout, 0, len(sent))
	for i, t := range sent {
		switch err := results[i]; {
		case err == nil:
			confirmed = append(confirmed, t)
		case sendErr == nil && !m.cfg.Target.Unconfirmed(err):
			m.unmigratable(t, err.Error()) // returned, or a delay that no longer fits
		default:
			unsent = append(unsent, t.ID) // refused, or its fate unknown: back to the managers
			if unsentErr == nil {
				unsentErr = err
			}
		}
	}
	removeErr := m.remove(ctx, confirmed)
	m.cfg.Logger.Debug("Batch sent and removed", watermill.LogFields{"send": sentAt.Sub(now), "remove": time.Since(sentAt)})
	if back := append(putBack, unsent...); len(back) > 0 {
		n, err := m.handing.Release(context.WithoutCancel(ctx), back)
		m.mu.Lock()
		m.result.Released += n
		m.mu.Unlock()
		if err != nil {
			return errors.Join(sendErr, removeErr, fmt.Errorf("rabbitmq: putting back %d timeout(s): %w", len(back), err))
		}
	}
	if len(unsent) > 0 && sendErr == nil {
		sendErr = fmt.Errorf("rabbitmq: the broker did not take %d message(s); their timeouts were put back: %w", len(unsent), unsentErr)
	}
	m.progress()
	return errors.Join(sendErr, removeErr)
}

// manyRemover is implemented by stores that remove many timeouts in one round trip (those the
// satellites batch with); a migration then removes each batch with one call.
type manyRemover interface {
	RemoveMany(ctx context.Context, ids []string) ([]string, error)
}

// remove removes the timeouts the broker took: in one call where the store can, otherwise
// Removers at a time.
func (m *migration) remove(ctx context.Context, sent []persistence.Timeout) error {
	if len(sent) == 0 {
		return nil
	}
	if many, ok := m.cfg.Store.(manyRemover); ok {
		ids := make([]string, len(sent))
		for i, t := range sent {
			ids[i] = t.ID
		}
		removed, err := many.RemoveMany(ctx, ids)
		if err != nil {
			return m.notRemoved(ids, err)
		}
		m.mu.Lock()
		m.result.Migrated += len(removed)
		m.result.AlreadyGone += len(ids) - len(removed)
		m.done += len(ids)
		m.mu.Unlock()
		return nil
	}
	var (
		wg      sync.WaitGroup
		next    = make(chan persistence.Timeout)
		mu      sync.Mutex
		failed  []string
		lastErr error
	)
	for range min(m.cfg.Removers, len(sent)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range next {
				removed, err := m.cfg.Store.Remove(ctx, t.ID)
				if err != nil {
					mu.Lock()
					failed, lastErr = append(failed, t.ID), err
					mu.Unlock()
					continue
				}
				m.mu.Lock()
				if removed {
					m.result.Migrated++
				} else {
					m.result.AlreadyGone++
				}
				m.done++
				m.mu.Unlock()
			}
		}()
	}
	for _, t := range sent {
		next <- t
	}
	close(next)
	wg.Wait()
	if len(failed) == 0 {
		return nil
	}
	return m.notRemoved(failed, lastErr)
}

// notRemoved records timeouts sent but not removed; they stay hidden.
func (m *migration) notRemoved(ids []string, err error) error {
	m.mu.Lock()
	m.result.NotRemoved = append(m.result.NotRemoved, ids...)
	m.mu.Unlock()
	return fmt.Errorf("rabbitmq: %d timeout(s) were sent but not removed; they stay hidden and a rerun sends them again: %w", len(ids), err)
}

// destinationProblem says why timeouts cannot be migrated to destination, or "".
func (m *migration) destinationProblem(ctx context.Context, destination string) string {
	m.mu.Lock()
	reason, bad := m.dests[destination]
	known := m.known[destination]
	m.mu.Unlock()
	if bad || known {
		return reason
	}
	// A destination the preflight did not see: a timeout stored since.
	reason = ""
	if invalid, missing, err := m.cfg.Target.CheckDestination(ctx, destination); invalid != nil {
		reason = invalid.Error()
	} else if err == nil && missing {
		reason = "destination queue " + destination + " does not exist"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if reason != "" {
		m.dests[destination] = reason
	} else {
		if m.known == nil {
			m.known = map[string]bool{}
		}
		m.known[destination] = true
	}
	return reason
}

// unmigratable records t as left in the store; it stays hidden until the end of the run, so
// that no batch picks it again.
func (m *migration) unmigratable(t persistence.Timeout, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = map[string]struct{}{}
	}
	m.held[t.ID] = struct{}{}
	m.result.Unmigratable = append(m.result.Unmigratable, Unmigratable{ID: t.ID, Destination: t.Destination, Reason: reason})
	m.done++
}

func (m *migration) releaseHeld(ctx context.Context) error {
	m.mu.Lock()
	ids := make([]string, 0, len(m.held))
	for id := range m.held {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	n, err := m.handing.Release(ctx, ids)
	m.mu.Lock()
	m.result.Released += n
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rabbitmq: putting back %d unmigratable timeout(s): %w", len(ids), err)
	}
	return nil
}

func (m *migration) progress() {
	if m.cfg.OnProgress == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg.OnProgress(Progress{Total: m.total, Done: m.done, Migrated: m.result.Migrated, Elapsed: time.Since(m.start)})
}
