package satellites_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/wire"
)

const endpoint = "orders"

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

func TestForwardAlwaysFailingReachesTheErrorQueueAfterNumberOfRetriesPlusOne(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("NumberOfRetries=%d", retries), func(t *testing.T) {
			t.Parallel()
			b := setupDispatch(t, func(c *satellites.DispatchConfig) { c.NumberOfRetries = retries })
			b.published.refuse("payments")
			timeout := b.storeDue(t, "payments")

			deliveries := b.deliverUntilAcked(t, timeout.ID, 20)
			require.Equal(t, retries+1, deliveries, "NumberOfRetries + 1 attempts, not MSMQ's N+2")
			require.Equal(t, retries+1, b.published.refused())

			failed := b.published.only(t, wire.DefaultErrorQueue)
			require.Equal(t, timeout.ID, failed.UUID)
			require.Equal(t, "charge order 7", string(failed.Payload))
			require.Equal(t, "t-1", failed.Metadata.Get("trace-id"))
			require.Equal(t, "payments", failed.Metadata.Get(wire.HeaderDestination))
			require.Equal(t, fmt.Sprint(retries+1), failed.Metadata.Get(wire.HeaderFailureAttempts))
			require.Equal(t, wire.DispatcherQueue(endpoint), failed.Metadata.Get(wire.HeaderFailureQueue))
			require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), "destination refused")
			_, err := b.store.Peek(context.Background(), timeout.ID)
			require.ErrorIs(t, err, persistence.ErrNotFound, "it leaves the store once on the error queue")
		})
	}
}

func TestUnreadableTimeoutGoesToTheErrorQueueOnceAndLeavesTheStore(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, func(c *satellites.DispatchConfig) { c.NumberOfRetries = 5 })
	timeout := b.storeDue(t, "payments")
	b.store.corrupt(timeout.ID)

	require.Equal(t, 1, b.deliverUntilAcked(t, timeout.ID, 20), "a timeout that can never be read is not retried")
	failed := b.published.only(t, wire.DefaultErrorQueue)
	require.Equal(t, timeout.ID, string(failed.Payload), "what can be read: the id")
	require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), "cannot be read from the store and was removed from it")
	require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), persistence.ErrCorruptMetadata.Error())
	require.Equal(t, wire.DispatcherQueue(endpoint), failed.Metadata.Get(wire.HeaderFailureQueue))
	require.Empty(t, b.published.to("payments"))
	ok, err := b.store.Remove(context.Background(), timeout.ID)
	require.NoError(t, err)
	require.False(t, ok, "removed from the store")
}

func TestMalformedDispatcherMessageGoesToTheErrorQueueAtOnce(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, nil)
	require.NoError(t, b.dispatch.Handle(message.NewMessage(watermill.NewUUID(), []byte("bad\x00id"))))
	failed := b.published.only(t, wire.DefaultErrorQueue)
	require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), "control character")
}

func TestFailingToRecordFailuresTripsTheRecoveryBreakerAndKeepsTheMessage(t *testing.T) {
	t.Parallel()
	recovery := &tripLog{}
	breaker, err := breaker.NewRateBreaker(breaker.RateBreakerConfig{
		Name: "recovery", MaxFailuresPerSecond: 1, Message: critical.RecoveryMessage, OnTrip: recovery.record,
	})
	require.NoError(t, err)
	b := setupDispatch(t, func(c *satellites.DispatchConfig) { c.RecoveryBreaker = breaker })
	b.published.refuse("payments")
	b.store.failIncrements()
	timeout := b.storeDue(t, "payments")

	for n := 1; n <= 31; n++ { // more than 1 per second over 30 s
		err := b.dispatch.Handle(dispatcherqueue.Encode(timeout.ID))
		require.ErrorIs(t, err, errStoreDown, "delivery %d must be nacked", n)
	}
	trips := recovery.all()
	require.Len(t, trips, 1)
	require.Equal(t, "Failed to execute error handling for delayed message forwarding", trips[0].Message)
	require.ErrorIs(t, trips[0], errStoreDown)

	require.Empty(t, b.published.to(wire.DefaultErrorQueue), "not moved to the error queue")
	kept, err := b.store.Peek(context.Background(), timeout.ID)
	require.NoError(t, err, "not lost")
	require.Zero(t, kept.FailureCount)
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

func TestForwardFailingDuringTheStopIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	var stopping atomic.Bool
	b := setupDispatch(t, func(c *satellites.DispatchConfig) { c.Stopping = stopping.Load })
	b.published.refuse("payments")
	timeout := b.storeDue(t, "payments")

	stopping.Store(true)
	for range 3 { // NumberOfRetries is 0: a counted attempt would send it to the error queue
		err := b.dispatch.Handle(dispatcherqueue.Encode(timeout.ID))
		require.ErrorIs(t, err, context.Canceled, "nacked, and not logged as a failure by the router")
	}
	require.Empty(t, b.published.to(wire.DefaultErrorQueue))
	kept, err := b.store.Peek(context.Background(), timeout.ID)
	require.NoError(t, err, "the timeout stays for the next start")
	require.Zero(t, kept.FailureCount, "no attempt counted")
}

func TestForwardThatMayHaveBeenDiscardedKeepsItsTimeout(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, func(c *satellites.DispatchConfig) { c.Interrupted = func() bool { return true } })
	timeout := b.storeDue(t, "payments")

	err := b.dispatch.Handle(dispatcherqueue.Encode(timeout.ID))
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, b.published.to("payments"), 1, "it was published")
	_, err = b.store.Peek(context.Background(), timeout.ID)
	require.NoError(t, err, "but not removed: the Pub/Sub may have discarded it")
}
