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

// batchStore is a memory store (a persistence.BatchStore) whose batch calls are counted and can
// be made to fail for a batch of many, as one bad row among them makes a real batch fail; the
// satellites then go on id by id, with batches of one.
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

// slowPublisher is a recordingPublisher whose publishes take a while, as a broker's confirms do,
// so that messages handled meanwhile form batches.
type slowPublisher struct {
	recordingPublisher
	mu    sync.Mutex
	calls int
}

func (p *slowPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
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

func TestBatchDispatchForwardsEachOnceAndRemovesIt(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	ids := b.storeDue(t, 100, "payments", "shipping", "billing")

	for _, err := range b.handleAll(ids) {
		require.NoError(t, err)
	}
	got := map[string]int{}
	for _, dest := range []string{"payments", "shipping", "billing"} {
		msgs := b.published.to(dest)
		require.Len(t, msgs, 100, dest)
		for _, m := range msgs {
			got[m.UUID]++
			require.Equal(t, m.UUID, m.Metadata.Get("trace-id"), "headers kept")
			require.Empty(t, m.Metadata.Get(wire.HeaderExpire), "routing headers dropped")
			require.Contains(t, string(m.Payload), dest)
		}
	}
	require.Len(t, got, len(ids))
	for id, n := range got {
		require.Equal(t, 1, n, "%s forwarded once", id)
	}
	st, err := b.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.Zero(t, st.Pending, "every forwarded timeout removed")
	require.Less(t, b.published.publishCalls(), len(ids), "messages handled together are published together")
}

func TestBatchDispatchAcksARedeliveryHandledAtTheSameTime(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	ids := b.storeDue(t, 20, "payments")
	twice := append(append([]string(nil), ids...), ids...)

	for _, err := range b.handleAll(twice) {
		require.NoError(t, err, "a delivery that finds its timeout gone is acked")
	}
	got := map[string]bool{}
	for _, m := range b.published.to("payments") {
		got[m.UUID] = true
	}
	require.Len(t, got, len(ids), "each forwarded")
	require.Len(t, b.published.to("payments"), len(ids), "each once: never in two batches at the same time")
	st, err := b.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.Zero(t, st.Pending)
}

func TestBatchDispatchFallsBackToOneByOneWhenTheBatchLookUpFails(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	b.store.peekErr = errors.New("statement too long")
	ids := b.storeDue(t, 50, "payments")

	for _, err := range b.handleAll(ids) {
		require.NoError(t, err)
	}
	require.Len(t, b.published.to("payments"), len(ids))
}

func TestBatchDispatchRemovesOneByOneWhenTheBatchRemovalFails(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	b.store.removeErr = errors.New("connection reset")
	ids := b.storeDue(t, 50, "payments")

	for _, err := range b.handleAll(ids) {
		require.NoError(t, err)
	}
	require.Len(t, b.published.to("payments"), len(ids))
	st, err := b.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.Zero(t, st.Pending)
}

func TestBatchDispatchCountsAFailedForwardForEachMessage(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, func(c *satellites.DispatchConfig) { c.NumberOfRetries = 1 })
	b.published.refuse("payments")
	ids := b.storeDue(t, 30, "payments")
	ok := b.storeDue(t, 30, "shipping")

	errs := b.handleAll(append(append([]string(nil), ids...), ok...))
	for i, err := range errs {
		if i < len(ids) {
			require.Error(t, err, "a refused forward is nacked for another attempt")
		} else {
			require.NoError(t, err, "another destination of the batch is not held back")
		}
	}
	for _, id := range ids {
		kept, err := b.store.Peek(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, 1, kept.FailureCount)
	}
	require.Len(t, b.published.to("shipping"), len(ok))

	// The second attempt is the last: each goes to the error queue and leaves the store.
	for _, err := range b.handleAll(ids) {
		require.NoError(t, err)
	}
	require.Len(t, b.published.to(wire.DefaultErrorQueue), len(ids))
	st, err := b.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.Zero(t, st.Pending)
}

func TestBatchDispatchOfAMissingTimeoutAcksIt(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	ids := append(b.storeDue(t, 10, "payments"), "gone-1", "gone-2")
	for _, err := range b.handleAll(ids) {
		require.NoError(t, err)
	}
	require.Len(t, b.published.to("payments"), 10)
}

func TestMaxBatchOneDispatchesEachAlone(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, func(c *satellites.DispatchConfig) { c.MaxBatch = 1 })
	ids := b.storeDue(t, 20, "payments")
	for _, err := range b.handleAll(ids) {
		require.NoError(t, err)
	}
	require.Equal(t, len(ids), b.published.publishCalls())
	b.store.mu.Lock()
	defer b.store.mu.Unlock()
	require.Zero(t, b.store.peekedMany+b.store.removedMany, "every call is a batch of one")
	require.Equal(t, len(ids), b.store.peekCalls)
}

// storeSatellite returns a store satellite on b's store and publisher.
func (b *batchBundle) storeSatellite(t *testing.T, stored func(time.Time)) *satellites.Store {
	t.Helper()
	breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "store", TimeToWait: time.Hour, Message: critical.StoreMessage,
		RetryDelay: time.Millisecond, OnTrip: func(*critical.Error) {},
	})
	require.NoError(t, err)
	t.Cleanup(breaker.Stop)
	s, err := satellites.NewStore(satellites.StoreConfig{
		Endpoint: endpoint, Store: b.store, ErrorQueue: errorqueue.New(b.published, ""),
		Breaker: breaker, OnStored: stored,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	return s
}

func delayedMessage(id, destination string, due time.Time) *message.Message {
	msg := message.NewMessage(id, []byte("charge "+id))
	msg.Metadata.Set(wire.HeaderExpire, wireparse.FormatExpire(due))
	msg.Metadata.Set(wire.HeaderDestination, destination)
	msg.Metadata.Set("trace-id", id)
	return msg
}

func handleConcurrently(s *satellites.Store, msgs []*message.Message) []error {
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, msg := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Handle(msg)
		}()
	}
	wg.Wait()
	return errs
}

func TestBatchStoreStoresEachOnceAndAcksRedeliveries(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	var mu sync.Mutex
	woken := 0
	s := b.storeSatellite(t, func(time.Time) { mu.Lock(); woken++; mu.Unlock() })
	due := time.Now().Add(time.Hour)
	var msgs []*message.Message
	for i := range 200 {
		msgs = append(msgs, delayedMessage(fmt.Sprintf("m-%d", i), "payments", due))
	}
	redelivered := msgs[:20]

	for _, err := range handleConcurrently(s, append(append([]*message.Message(nil), msgs...), redelivered...)) {
		require.NoError(t, err)
	}
	st, err := b.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.Equal(t, 200, st.Pending)
	require.Equal(t, 200, woken, "the poller hears of each new timeout once")
	got, err := b.store.Peek(context.Background(), "m-7")
	require.NoError(t, err)
	require.Equal(t, "charge m-7", string(got.Payload))
	require.Equal(t, "m-7", got.Metadata["trace-id"])
	require.Empty(t, got.Metadata[wire.HeaderDestination], "routing headers are not kept")
	require.Empty(t, b.published.to(wire.DefaultErrorQueue))
}

func TestBatchStoreSendsAReusedUUIDToTheErrorQueue(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	s := b.storeSatellite(t, nil)
	due := time.Now().Add(time.Hour)
	msgs := []*message.Message{delayedMessage("same", "payments", due), delayedMessage("other", "payments", due)}
	for _, err := range handleConcurrently(s, msgs) {
		require.NoError(t, err)
	}
	var clash []*message.Message
	for i := range 10 {
		clash = append(clash, delayedMessage(fmt.Sprintf("new-%d", i), "payments", due))
	}
	clash = append(clash, delayedMessage("same", "shipping", due))
	for _, err := range handleConcurrently(s, clash) {
		require.NoError(t, err)
	}
	failed := b.published.only(t, wire.DefaultErrorQueue)
	require.Equal(t, "same", failed.UUID)
	require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), "reuses its UUID")
	kept, err := b.store.Peek(context.Background(), "same")
	require.NoError(t, err)
	require.Equal(t, "payments", kept.Destination, "the first stays")
}

func TestBatchStoreFallsBackToOneByOneWhenTheBatchFails(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	b.store.storeErr = errors.New("deadlock detected")
	s := b.storeSatellite(t, nil)
	due := time.Now().Add(time.Hour)
	var msgs []*message.Message
	for i := range 50 {
		msgs = append(msgs, delayedMessage(fmt.Sprintf("m-%d", i), "payments", due))
	}
	bad := delayedMessage("bad", "payments", due)
	bad.Metadata.Set(wire.HeaderExpire, "tomorrow")
	for _, err := range handleConcurrently(s, append(msgs, bad)) {
		require.NoError(t, err)
	}
	st, err := b.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.Equal(t, 50, st.Pending)
	require.Equal(t, "bad", b.published.only(t, wire.DefaultErrorQueue).UUID, "an unreadable message is rejected as ever")
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

// Two announcements of one id handled at the same moment in batches running side by side (an id
// announced again after a restart gave its claim back, while its earlier announcement is still
// being handled) forward it once: the second waits for the first batch, then finds it gone. The
// other ids of the second batch go on meanwhile.
func TestBatchDispatchNeverForwardsOneIDInTwoBatchesAtOnce(t *testing.T) {
	t.Parallel()
	published := &gatedPublisher{topic: "slow", gate: make(chan struct{}), started: make(chan struct{})}
	b := &batchBundle{store: &batchStore{memStore: memory.New().(memStore)}}
	breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "dispatch", TimeToWait: time.Hour, Message: critical.DispatchMessage,
		RetryDelay: time.Millisecond, OnTrip: func(*critical.Error) {},
	})
	require.NoError(t, err)
	t.Cleanup(breaker.Stop)
	b.dispatch, err = satellites.NewDispatch(satellites.DispatchConfig{
		Endpoint: endpoint, Store: b.store, Publisher: published,
		ErrorQueue: errorqueue.New(published, ""), Breaker: breaker,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	twice := b.storeDue(t, 1, "slow")[0]
	others := b.storeDue(t, 20, "fast")

	first := make(chan error, 1)
	go func() { first <- b.dispatch.Handle(dispatcherqueue.Encode(twice)) }()
	<-published.started // the first batch is forwarding the id
	second := make(chan error, 1)
	go func() {
		second <- b.dispatch.Handle(dispatcherqueue.Encode(append(append([]string(nil), others...), twice)...))
	}()
	// Enough ids for a batch of their own, beside the first: they are forwarded while it waits.
	require.Eventually(t, func() bool { return len(published.to("fast")) == len(others) }, 30*time.Second, time.Millisecond,
		"the second batch's other ids forwarded while the first batch waits")
	close(published.gate)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.Len(t, published.to("slow"), 1, "the id announced twice is forwarded once")
	st, err := b.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.Zero(t, st.Pending)
}
