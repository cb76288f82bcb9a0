package satellites_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/errorqueue"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/wire"
)

const endpoint = "orders"

// memStore is the memory store with the optional interfaces it implements, embedded by name: a
// field named Store would hide the Store method.
type memStore interface {
	persistence.Store
	persistence.BatchStore
	persistence.Scheduler
	persistence.Inspector
	persistence.Releaser
	persistence.Handover
	persistence.Claimer
	persistence.Parker
}

// batchStore is a memory store (a persistence.BatchStore) whose batch calls are counted. They can
// be made to fail for a batch of many, as one bad row makes a real batch fail. The satellites then
// go on id by id, with batches of one.
type batchStore struct {
	memStore
	mu          sync.Mutex
	storeErr    error
	peekErr     error
	removeErr   error
	peekCalls   int
	removeCalls int
	peekedMany  int // calls with more than one id
	removedMany int
}

func (s *batchStore) StoreMany(ctx context.Context, ts []persistence.Timeout) ([]string, error) {
	s.mu.Lock()
	err := s.storeErr
	s.mu.Unlock()
	if err != nil && len(ts) > 1 {
		return nil, err
	}
	return s.memStore.StoreMany(ctx, ts)
}

func (s *batchStore) PeekMany(ctx context.Context, ids []string) ([]persistence.Timeout, error) {
	s.mu.Lock()
	s.peekCalls++
	if len(ids) > 1 {
		s.peekedMany++
	}
	err := s.peekErr
	s.mu.Unlock()
	if err != nil && len(ids) > 1 {
		return nil, err
	}
	return s.memStore.PeekMany(ctx, ids)
}

func (s *batchStore) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	s.mu.Lock()
	s.removeCalls++
	if len(ids) > 1 {
		s.removedMany++
	}
	err := s.removeErr
	s.mu.Unlock()
	if err != nil && len(ids) > 1 {
		return nil, err
	}
	return s.memStore.RemoveMany(ctx, ids)
}

// slowPublisher is a recordingPublisher whose publishes take a while, as a broker's confirms do, so
// that messages handled meanwhile form batches.
type slowPublisher struct {
	recordingPublisher
	mu    sync.Mutex
	calls int
}

func (p *slowPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // fake time in the tests' bubbles: a broker's confirm takes a while
	return p.recordingPublisher.Publish(topic, msgs...)
}

func (p *slowPublisher) publishCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

type batchBundle struct {
	dispatch  *satellites.Dispatch
	store     *batchStore
	published *slowPublisher
}

func setupBatch(t *testing.T, mutate func(*satellites.DispatchConfig)) *batchBundle {
	t.Helper()
	b := &batchBundle{store: &batchStore{memStore: memory.New().(memStore)}, published: &slowPublisher{}}
	breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "dispatch", TimeToWait: time.Hour, Message: critical.DispatchMessage,
		RetryDelay: time.Millisecond, OnTrip: func(*critical.Error) {},
	})
	require.NoError(t, err)
	t.Cleanup(breaker.Stop)
	cfg := satellites.DispatchConfig{
		Endpoint: endpoint, Store: b.store, Publisher: b.published,
		ErrorQueue: errorqueue.New(b.published, ""), Breaker: breaker,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	b.dispatch, err = satellites.NewDispatch(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	return b
}

// storeDue stores n due timeouts for each destination and returns their ids.
func (b *batchBundle) storeDue(t *testing.T, n int, destinations ...string) []string {
	t.Helper()
	var ids []string
	for _, dest := range destinations {
		for i := range n {
			id := watermill.NewUUID()
			_, err := b.store.Store(context.Background(), persistence.Timeout{
				ID: id, Destination: dest, Due: time.Now(), Payload: fmt.Appendf(nil, "%s %d", dest, i),
				Metadata: map[string]string{"trace-id": id, wire.HeaderExpire: "routing header, dropped"},
			})
			require.NoError(t, err)
			ids = append(ids, id)
		}
	}
	return ids
}

// handleAll hands the dispatcher message of each id to the satellite at the same time, as a
// subscriber with many consumers does, and returns each result.
func (b *batchBundle) handleAll(ids []string) []error { return handleAtOnce(b.dispatch, ids) }

// handleAtOnce hands the dispatcher message of each id to d at the same time, so that they are
// dispatched in batches, and returns each result.
func handleAtOnce(d *satellites.Dispatch, ids []string) []error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.Handle(dispatcherqueue.Encode(id))
		}()
	}
	wg.Wait()
	return errs
}

// gatedPublisher is a recordingPublisher whose publishes to one topic wait until the gate opens,
// and which says when the first of them started.
type gatedPublisher struct {
	recordingPublisher
	topic   string
	gate    chan struct{}
	started chan struct{}
	once    sync.Once
}

func (p *gatedPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic == p.topic {
		p.once.Do(func() { close(p.started) })
		<-p.gate
	}
	return p.recordingPublisher.Publish(topic, msgs...)
}

type dispatchBundle struct {
	dispatch  *satellites.Dispatch
	store     *brokenStore
	published *recordingPublisher
	trips     *tripLog
}

// setupDispatch returns a dispatch satellite over a memory store; mutate adjusts its config.
func setupDispatch(t *testing.T, mutate func(*satellites.DispatchConfig)) *dispatchBundle {
	t.Helper()
	b := &dispatchBundle{store: &brokenStore{innerStore: memory.New()}, published: &recordingPublisher{}, trips: &tripLog{}}
	breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "dispatch", TimeToWait: time.Hour, Message: critical.DispatchMessage,
		RetryDelay: time.Millisecond, OnTrip: b.trips.record,
	})
	require.NoError(t, err)
	t.Cleanup(breaker.Stop)
	cfg := satellites.DispatchConfig{
		Endpoint:   endpoint,
		Store:      b.store,
		Publisher:  b.published,
		ErrorQueue: errorqueue.New(b.published, ""),
		Breaker:    breaker,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	b.dispatch, err = satellites.NewDispatch(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	return b
}

// storeDue stores a timeout that is due now.
func (b *dispatchBundle) storeDue(t *testing.T, destination string) persistence.Timeout {
	t.Helper()
	timeout := persistence.Timeout{
		ID: watermill.NewUUID(), Destination: destination, Due: time.Now(),
		Payload: []byte("charge order 7"), Metadata: map[string]string{"trace-id": "t-1"},
	}
	_, err := b.store.Store(context.Background(), timeout)
	require.NoError(t, err)
	return timeout
}

// deliverUntilAcked hands the dispatcher message for id to the satellite until it is acked, as a
// broker redelivers a nacked message, and returns the number of deliveries.
func (b *dispatchBundle) deliverUntilAcked(t *testing.T, id string, limit int) int {
	t.Helper()
	for n := 1; n <= limit; n++ {
		if err := b.dispatch.Handle(dispatcherqueue.Encode(id)); err == nil {
			return n
		}
	}
	t.Fatalf("dispatcher message for %s still nacked after %d deliveries", id, limit)
	return 0
}

var errStoreDown = errors.New("store refused the update")

// innerStore names the embedded store: a field named Store would hide the Store method.
type innerStore = persistence.Store

// brokenStore breaks chosen calls of a store.
type brokenStore struct {
	innerStore
	mu         sync.Mutex
	corrupted  map[string]bool
	increments bool
}

func (s *brokenStore) corrupt(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.corrupted == nil {
		s.corrupted = map[string]bool{}
	}
	s.corrupted[id] = true
}

func (s *brokenStore) failIncrements() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.increments = true
}

func (s *brokenStore) Peek(ctx context.Context, id string) (persistence.Timeout, error) {
	s.mu.Lock()
	corrupt := s.corrupted[id]
	s.mu.Unlock()
	if corrupt {
		return persistence.Timeout{}, fmt.Errorf("peek %q: %w: unknown version 7", id, persistence.ErrCorruptMetadata)
	}
	return s.innerStore.Peek(ctx, id)
}

func (s *brokenStore) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	fail := s.increments
	s.mu.Unlock()
	if fail {
		return false, errStoreDown
	}
	return s.innerStore.IncrementFailureCount(ctx, id)
}

// recordingPublisher keeps what is published, and refuses chosen topics.
type recordingPublisher struct {
	mu       sync.Mutex
	msgs     map[string][]*message.Message
	refusing map[string]bool
	nRefused int
}

func (p *recordingPublisher) refuse(topic string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refusing == nil {
		p.refusing = map[string]bool{}
	}
	p.refusing[topic] = true
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refusing[topic] {
		p.nRefused++
		return errors.New("destination refused the message")
	}
	if p.msgs == nil {
		p.msgs = map[string][]*message.Message{}
	}
	p.msgs[topic] = append(p.msgs[topic], msgs...)
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) to(topic string) []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*message.Message(nil), p.msgs[topic]...)
}

func (p *recordingPublisher) refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nRefused
}

func (p *recordingPublisher) only(t *testing.T, topic string) *message.Message {
	t.Helper()
	msgs := p.to(topic)
	require.Len(t, msgs, 1, "messages on %s", topic)
	return msgs[0]
}

type tripLog struct {
	mu   sync.Mutex
	errs []*critical.Error
}

func (l *tripLog) record(e *critical.Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, e)
}

func (l *tripLog) all() []*critical.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*critical.Error(nil), l.errs...)
}

func (p *recordingPublisher) accept(topic string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.refusing, topic)
}

// requireEachOnce checks that each id reached topic exactly once.
func requireEachOnce(t *testing.T, msgs []*message.Message, ids []string) {
	t.Helper()
	got := map[string]int{}
	for _, m := range msgs {
		got[m.UUID]++
	}
	require.Len(t, got, len(ids))
	for _, id := range ids {
		require.Equal(t, 1, got[id], "%s delivered once", id)
	}
}

// storeClaimedAt stores a timeout due at due and claims it, as the poller does before announcing
// it.
func (b *dispatchBundle) storeClaimedAt(t *testing.T, destination string, due time.Time) persistence.Timeout {
	t.Helper()
	timeout := persistence.Timeout{ID: watermill.NewUUID(), Destination: destination, Due: due, Payload: []byte("charge order 7")}
	_, err := b.store.Store(context.Background(), timeout)
	require.NoError(t, err)
	ids, err := b.store.ClaimDue(context.Background(), due, 10, time.Minute)
	require.NoError(t, err)
	require.Contains(t, ids, timeout.ID)
	return timeout
}

// announcedAhead is the dispatcher message that announces id as due by dueBy.
func announcedAhead(id string, dueBy time.Time) *message.Message {
	msg := dispatcherqueue.Encode(id)
	msg.Metadata.Set(dispatcherqueue.HeaderDispatchAt, wireparse.FormatExpire(dueBy))
	return msg
}
