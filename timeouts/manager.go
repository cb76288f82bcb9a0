package timeouts

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/announce"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/errorqueue"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/internal/storeclock"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// Manager is the timeout manager of one endpoint: the store satellite, the poller and the
// dispatch satellite, run by a Watermill router. Create it with NewManager and add it to a
// router with AddToRouter. Publish delayed messages through Publisher (or NewPublisher in
// another process).
type Manager struct {
	cfg    Config
	logger watermill.LoggerAdapter

	store           *satellites.Store
	dispatch        *satellites.Dispatch
	poller          *poller
	publisher       *Publisher
	breakers        []*breaker.CircuitBreaker
	breakerNames    []string // breakers[i]'s name
	metrics         *metrics
	tracing         tracing
	svc             *service // the background work: set-up, instance hold, poller, release
	stop            *lifecycle
	instance        *instance
	failures        lastFailures      // each breaker's last failure, for Health
	clock           *storeclock.Clock // the store's time, measured against Config.Clock
	recoveryBreaker *breaker.RateBreaker
	// signal is the lifecycle handler's message channel (routerSignal). It carries nothing. The
	// stop closes it.
	signal chan *message.Message
	setUp  atomic.Bool // the store's infrastructure is set up, for Health

	mu       sync.Mutex
	router   *message.Router
	handlers []*message.Handler // the store and dispatch satellites' handlers
	critErr  *critical.Error
	startErr error // why the manager refused to start (an instance name in use)

	done  <-chan struct{} // closed when the manager has stopped: svc.Stopped()
	ready chan struct{}   // closed once the store's infrastructure is set up
}

// NewManager validates config and assembles the timeout manager.
func NewManager(config Config, logger watermill.LoggerAdapter) (*Manager, error) {
	config.setDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	if err := checkGoChannel(config.Publisher); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	m := &Manager{
		cfg:    config,
		logger: logger.With(watermill.LogFields{"endpoint": config.Endpoint}),
		ready:  make(chan struct{}),
		signal: make(chan *message.Message),
	}
	m.svc = newService(m.run, m.onStop)
	m.done = m.svc.Stopped()
	m.stop = newLifecycle(config.Store, config.Publisher, m.svc, m.logger)
	m.instance = newInstance(config)
	m.tracing = newTracing(config.TracerProvider)

	var breakerNames []string
	newBreaker := func(name string, wait time.Duration, msg string) (*breaker.CircuitBreaker, error) {
		b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: name, TimeToWait: wait, Message: msg, RetryDelay: config.RetryDelay, CallTimeout: config.CallTimeout, OnTrip: m.raise,
			OnFailure: func(err error) { m.metrics.onFailure(name); m.failures.note(name, err, config.Clock.Now()) },
			Now:       config.Clock.Now,
		})
		if err == nil {
			m.breakers = append(m.breakers, b)
			breakerNames = append(breakerNames, name)
		}
		return b, err
	}
	fetchBreaker, err := newBreaker("fetch", config.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages, critical.FetchMessage)
	if err != nil {
		return nil, err
	}
	storeBreaker, err := newBreaker("store", config.TimeToTriggerStoreCircuitBreaker, critical.StoreMessage)
	if err != nil {
		return nil, err
	}
	dispatchBreaker, err := newBreaker("dispatch", config.TimeToTriggerDispatchCircuitBreaker, critical.DispatchMessage)
	if err != nil {
		return nil, err
	}

	recoveryBreaker, err := breaker.NewRateBreaker(breaker.RateBreakerConfig{
		Name: "recovery", MaxFailuresPerSecond: config.MaximumRecoveryFailuresPerSecond,
		Message: critical.RecoveryMessage, OnTrip: m.raise,
		OnFailure: func(error) { m.metrics.onFailure("recovery") },
		Now:       config.Clock.Now,
	})
	if err != nil {
		return nil, err
	}
	m.recoveryBreaker = recoveryBreaker

	m.breakerNames = breakerNames
	m.clock = storeclock.New(storeclock.Config{
		Local: config.Clock.Now, Store: config.Store, Alarm: config.ClockSkewAlarm,
		OnMeasured: func(c storeclock.Measurement) { m.metrics.onClock(c) },
	}, m.logger)
	if m.metrics, err = newMetrics(config.MetricsRegisterer, config.Endpoint, config.Store, m.clock.Now, m.breakers, breakerNames); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}

	// Each satellite sends to the error queue as a call of its own breaker (satellites.GuardedPublisher).
	storeErrors := errorqueue.New(satellites.GuardedPublisher{Publisher: config.Publisher, Breaker: storeBreaker}, config.ErrorQueue)
	dispatchErrors := errorqueue.New(satellites.GuardedPublisher{Publisher: config.Publisher, Breaker: dispatchBreaker}, config.ErrorQueue)
	m.stop.now = m.clock.Now
	m.poller = &poller{
		store:      config.Store,
		clock:      m.clock,
		announcer:  announce.NewPublisher(config.Publisher, config.Endpoint, 0, config.AnnouncementIDs),
		interval:   config.PollInterval,
		batch:      config.ClaimBatchSize,
		lease:      config.ClaimLease,
		claimAs:    m.instance.claimsAs(),
		retryDelay: config.RetryDelay,
		fetch:      fetchBreaker,
		dispatch:   dispatchBreaker,
		stop:       m.stop,
		logger:     m.logger,
		lead:       announceLead,
		onClaimed:  m.metrics.onClaimed,
	}
	if m.stop.goChannel != nil {
		m.poller.lead = 0
	}
	m.poller.init()

	if m.store, err = satellites.NewStore(satellites.StoreConfig{
		Endpoint:   config.Endpoint,
		Store:      config.Store,
		ErrorQueue: storeErrors,
		Breaker:    storeBreaker,
		Now:        m.clock.Now,
		OnStored: func(due time.Time) {
			m.metrics.onStored()
			m.poller.wake(due)
		},
	}, m.logger); err != nil {
		return nil, err
	}
	if m.dispatch, err = satellites.NewDispatch(satellites.DispatchConfig{
		Endpoint:           config.Endpoint,
		Store:              config.Store,
		Publisher:          config.Publisher,
		ErrorQueue:         dispatchErrors,
		Breaker:            dispatchBreaker,
		NumberOfRetries:    config.NumberOfRetries,
		RecoveryBreaker:    recoveryBreaker,
		OnDispatched:       m.onDispatched,
		OnParked:           m.onParked,
		OnRepublishedAlone: m.metrics.onRepublishedAlone,
		OnBatch:            m.metrics.onDispatchBatch,
		Forwarder:          config.Forwarder,
		Stopping:           m.stop.stopping,
		Interrupted:        m.stop.interrupted,
		Now:                m.clock.Earliest,
	}, m.logger); err != nil {
		return nil, err
	}
	if m.publisher, err = NewPublisher(config.Publisher, config.Endpoint); err != nil {
		return nil, err
	}
	// Relative delays count from the store's time, and only what is due on its clock goes
	// straight to its topic.
	m.publisher.now, m.publisher.reached = m.clock.Now, m.clock.Earliest
	return m, nil
}

// AddToRouter adds the store and dispatch satellites to router, and the manager's lifecycle
// handler, which carries no messages. The manager's background work (setting the store up, then
// polling) runs while the router does. It starts when the router runs its handlers. It stops
// when the router closes.
//
// To stop, close the router, then wait for Done before closing the store. The same holds for
// the Publisher and Subscriber, which the manager does not close. The stop lets forwards
// already started finish. What it cuts short stays in the store, claimable again at once by
// the next start.
func (m *Manager) AddToRouter(router *message.Router) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.router != nil {
		return fmt.Errorf("%w: the manager of %s is already added to a router", ErrInvalidConfig, m.cfg.Endpoint)
	}
	m.router = router
	m.handlers = []*message.Handler{
		router.AddConsumerHandler(m.store.Name(), m.store.Queue(), m.cfg.Subscriber,
			m.whenReady(m.tracing.stored(m.store.Queue(), m.store.Handle))),
		router.AddConsumerHandler(m.dispatch.Name(), m.dispatch.Queue(), m.cfg.Subscriber, m.whenReady(m.handleDue)),
	}
	router.AddConsumerHandler(m.store.Name()+".lifecycle", "timeoutmill.lifecycle", &routerSignal{svc: m.svc, none: m.signal},
		func(*message.Message) error { return nil })
	return nil
}

// whenReady holds a satellite's messages until the store is set up (Ready). A message handled
// before its tables exist would fail, and count against a breaker.
func (m *Manager) whenReady(handle message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		select {
		case <-m.ready:
			return handle(msg)
		case <-msg.Context().Done():
			return fmt.Errorf("the store was not set up before the stop: %w", context.Canceled)
		}
	}
}

// handleDue dispatches the ids a dispatcher message announces, tells the poller they were
// handled (its claim window), and, on a GoChannel, records that they are settled.
func (m *Manager) handleDue(msg *message.Message) error {
	err := m.dispatch.Handle(msg)
	ids, _ := dispatcherqueue.Decode(msg) // none when malformed: Handle moved it to the error queue
	// Handled counts a nacked message's ids too: its redelivery counts them again, which only
	// widens the window a little.
	m.poller.handled(len(ids))
	if err == nil {
		m.stop.settled(ids...)
	}
	return err
}

// onDispatched is told of each timeout delivered: metrics, a span, a log line.
func (m *Manager) onDispatched(t persistence.Timeout, at time.Time) {
	m.metrics.onDispatched(t, at)
	m.tracing.dispatched(t, at)
	m.logger.Debug("Timeout dispatched", watermill.LogFields{
		"timeout_id": t.ID, "destination": t.Destination, "due": t.Due, "lateness": at.Sub(t.Due)})
}

// Publisher returns a publisher that routes delayed messages through this endpoint's Timeouts
// queue and publishes the others directly, on the Publisher of the Config.
func (m *Manager) Publisher() *Publisher { return m.publisher }

// Cancel deletes a pending timeout so that it is never delivered. It returns false when there
// was nothing to cancel (already delivered, or never stored).
func (m *Manager) Cancel(ctx context.Context, id string) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	ctx, cancel := m.bounded(ctx)
	defer cancel()
	return m.cfg.Store.Cancel(ctx, id)
}

// CancelByOwner deletes every pending timeout tagged with owner (see WithOwner) and returns how
// many it deleted. An empty owner would match no timeout. So it is refused with an error
// wrapping persistence.ErrInvalidTimeout.
func (m *Manager) CancelByOwner(ctx context.Context, owner string) (int, error) {
	if owner == "" {
		return 0, fmt.Errorf("%w: the owner is empty (it would match no timeout)", persistence.ErrInvalidTimeout)
	}
	ctx, cancel := m.bounded(ctx)
	defer cancel()
	return m.cfg.Store.CancelByOwner(ctx, owner)
}

// Err returns why the manager stopped on its own. That is the error that refused its start, or
// the first critical error raised. A start is refused when another running manager holds its
// Config.Instance. Then errors.Is(err, persistence.ErrInstanceInUse) holds, and the text names
// the instance. It returns nil otherwise.
func (m *Manager) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.startErr != nil {
		return m.startErr
	}
	if m.critErr == nil {
		return nil
	}
	return m.critErr
}

// Ready is closed once the store can be used. That is when the router has started the manager
// and it has created the store's tables (retrying while the store is unreachable). With
// SkipInfrastructureSetup or a store that needs no set-up, it is closed at once on start. With
// Config.Instance, the manager must also hold the name and give back the claims of an earlier
// run. When another running manager holds the name, Ready is never closed: the start is
// refused (see Err). With a store that has a clock of its own (persistence.Clocked), the
// manager must also have measured its offset to it. Calls on the store in the first moments
// after router.Running() (Cancel, CancelByOwner, the store's own Stats) may otherwise find no
// tables yet.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// Done is closed when the manager has stopped after its router closed. By then the poller
// announced what it had claimed. The router's handlers finished their forwards. What the stop
// cut short was given back to the store, claimable at once (persistence.Releaser). The
// Config.Instance name was let go. Close the store, and the Publisher and Subscriber, only
// after it.
func (m *Manager) Done() <-chan struct{} { return m.done }

// run is the manager's background work, the one goroutine of its service. It runs from the
// start of the router's handlers to the stop. It sets the store up, measures its clock and
// holds the instance name, retrying while the store is unreachable. Then it closes Ready and
// polls. When ctx ends it waits for the router's handlers, gives back what the stop cut short,
// and lets the instance name go.
func (m *Manager) run(ctx context.Context) {
	m.mu.Lock()
	router, handlers := m.router, m.handlers
	m.mu.Unlock()
	for _, h := range handlers {
		select {
		case <-h.Started():
		case <-ctx.Done():
		}
	}
	go m.watch(ctx, router, handlers)
	setUp := (m.cfg.SkipInfrastructureSetup || m.setupInfrastructure(ctx)) && m.measureClock(ctx)
	m.setUp.Store(setUp)
	if setUp && m.holdInstance(ctx) {
		close(m.ready)
		// Nothing is announced before every handler of the router has subscribed. On a
		// GoChannel a destination without a subscriber yet drops what is forwarded to it.
		// And a Subscribe waits for the publishes in flight. Among them may be an announcement
		// waiting for the dispatch satellite, whose forwards wait for that Subscribe.
		select {
		case <-router.Running():
		case <-ctx.Done():
		}
		m.poller.run(ctx)
	}
	// Router.Close returns once the router's handlers have finished. A second call waits for
	// the first. So the dispatch satellite has settled all it will.
	if err := router.Close(); err != nil {
		m.logger.Error("Waiting for the router's handlers at the stop failed", err, nil)
	}
	m.poller.wait()
	m.stop.release(m.stop.unsettled(), "claimed on an in-process Pub/Sub and not delivered")
	m.letInstanceGo()
}

// watch begins the stop when a satellite's handler stops without the router closing. Its
// subscription ended, as when the Pub/Sub closes under the router. The manager cannot go on
// without it. Its stop closes the router. It returns when ctx ends.
func (m *Manager) watch(ctx context.Context, router *message.Router, handlers []*message.Handler) {
	// A handler's Stopped channel is set once the router runs all its handlers.
	select {
	case <-router.Running():
	case <-ctx.Done():
		return
	}
	select {
	case <-handlers[0].Stopped():
	case <-handlers[1].Stopped():
	case <-ctx.Done():
		return
	}
	m.svc.begin()
}

// onStop runs when the stop begins: the breakers stop for good, and the lifecycle handler ends.
func (m *Manager) onStop() {
	for _, b := range m.breakers {
		b.Stop()
	}
	m.recoveryBreaker.Stop()
	close(m.signal)
}

// setupInfrastructure creates the store's tables. It retries under the fetch breaker while the
// store is unreachable, so an endpoint may start before its database. It reports whether the
// store is set up. False means ctx ended first.
func (m *Manager) setupInfrastructure(ctx context.Context) bool {
	installer, ok := m.cfg.Store.(persistence.Installer)
	if !ok {
		return true
	}
	for ctx.Err() == nil {
		callCtx, end := m.poller.fetch.Call(ctx)
		err := installer.SetupInfrastructure(callCtx)
		end(err)
		if err == nil {
			m.poller.fetch.Success()
			return true
		}
		if ctx.Err() != nil {
			return false // the router is stopping; not a storage failure
		}
		m.logger.Error("Setting up the store failed; retrying", err, nil)
		m.poller.fetch.Failure(ctx, err)
	}
	return false
}

// measureClock measures the offset to the store's clock (persistence.Clocked) before the
// satellites handle anything. It retries under the fetch breaker while the store is
// unreachable. So their first due times are judged on the store's clock. It reports whether it
// did. False means ctx ended first.
func (m *Manager) measureClock(ctx context.Context) bool {
	for ctx.Err() == nil {
		if m.poller.measure(ctx) {
			m.poller.fetch.Success()
			return true
		}
	}
	return false
}

// raise handles a critical error. It is recorded for Err, then handed to OnCriticalError or the
// default action.
func (m *Manager) raise(e *critical.Error) {
	m.mu.Lock()
	if m.critErr == nil {
		m.critErr = e
	}
	router := m.router
	m.mu.Unlock()

	if m.cfg.OnCriticalError != nil {
		go m.cfg.OnCriticalError(context.Background(), e)
		return
	}
	m.logger.Error("Critical error; closing the router", e, nil)
	if router != nil {
		go func() {
			if err := router.Close(); err != nil {
				m.logger.Error("Closing the router after a critical error failed", err, nil)
			}
		}()
	}
}
