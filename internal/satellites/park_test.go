package satellites_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	public "github.com/timeoutmill/timeoutmill/satellites"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
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

// bigPayload is more than sizeLimitPublisher takes.
const bigPayload = 1 << 10

// sizeLimitPublisher refuses a Publish with a message of bigPayload bytes or more, on every topic.
// RabbitMQ refuses one larger than its max_message_size so, the error queue too. It records the
// others. errorQueueErr, when set, is what a refused error-queue copy returns instead.
type sizeLimitPublisher struct {
	recordingPublisher
	errorQueueErr error
	refusals      atomic.Int64
}

func (p *sizeLimitPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if len(m.Payload) < bigPayload {
			continue
		}
		p.refusals.Add(1)
		if topic == wire.DefaultErrorQueue && p.errorQueueErr != nil {
			return p.errorQueueErr
		}
		return fmt.Errorf("publishing %d message(s) to %q: %w", len(msgs), topic, &amqp.Error{
			Code: amqp.PreconditionFailed, Server: true, Recover: true,
			Reason: fmt.Sprintf("PRECONDITION_FAILED - message size %d is larger than configured max size %d", len(m.Payload), bigPayload-1),
		})
	}
	return p.recordingPublisher.Publish(topic, msgs...)
}

// parkingStore is a memory store (a persistence.Parker) whose Park fails while parkErr is set.
type parkingStore struct {
	memStore
	mu      sync.Mutex
	parkErr error
	parks   int
}

func (s *parkingStore) failParks(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parkErr = err
}

func (s *parkingStore) Park(ctx context.Context, id, reason string) (bool, error) {
	s.mu.Lock()
	s.parks++
	err := s.parkErr
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	return s.memStore.Park(ctx, id, reason)
}

type parkBundle struct {
	dispatch  *satellites.Dispatch
	store     *parkingStore
	published *sizeLimitPublisher
	breaker   *breaker.CircuitBreaker
	trips     *tripLog
	parked    atomic.Int64 // OnParked calls
}

// setupPark returns a dispatch satellite over a parking memory store whose breaker trips after
// wait; mutate adjusts its config.
func setupPark(t *testing.T, wait time.Duration, mutate func(*satellites.DispatchConfig)) *parkBundle {
	t.Helper()
	b := &parkBundle{store: &parkingStore{memStore: memory.New().(memStore)}, published: &sizeLimitPublisher{}, trips: &tripLog{}}
	var err error
	b.breaker, err = breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "dispatch", TimeToWait: wait, Message: critical.DispatchMessage,
		RetryDelay: time.Millisecond, OnTrip: b.trips.record,
	})
	require.NoError(t, err)
	t.Cleanup(b.breaker.Stop)
	cfg := satellites.DispatchConfig{
		Endpoint: endpoint, Store: b.store, Publisher: b.published,
		ErrorQueue: errorqueue.New(b.published, ""), Breaker: b.breaker,
		OnParked: func(persistence.Timeout) { b.parked.Add(1) },
	}
	if mutate != nil {
		mutate(&cfg)
	}
	b.dispatch, err = satellites.NewDispatch(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	return b
}

// storeDue stores n due timeouts for destination with payloads of size bytes, and their ids.
func (b *parkBundle) storeDue(t *testing.T, n, size int, destination string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = watermill.NewUUID()
		payload := fmt.Appendf(nil, "%s %d ", destination, i)
		if size > len(payload) {
			payload = append(payload, make([]byte, size-len(payload))...)
		}
		_, err := b.store.Store(context.Background(), persistence.Timeout{ID: ids[i], Destination: destination, Due: time.Now(), Payload: payload})
		require.NoError(t, err)
	}
	return ids
}

// handleAll hands the dispatcher message of each id to the satellite at the same time, so that they
// are dispatched in batches, and returns each result.
func (b *parkBundle) handleAll(ids []string) []error { return handleAtOnce(b.dispatch, ids) }

func (b *parkBundle) peek(t *testing.T, id string) persistence.Timeout {
	t.Helper()
	got, err := b.store.Peek(context.Background(), id)
	require.NoError(t, err, "timeout %s is kept", id)
	return got
}

func TestUnforwardableTimeoutIsParkedAndTheOthersOfItsBatchDelivered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const wait = 300 * time.Millisecond
		b := setupPark(t, wait, func(c *satellites.DispatchConfig) { c.NumberOfRetries = 1 })
		ok := b.storeDue(t, 40, 10, "payments")
		big := b.storeDue(t, 1, bigPayload, "payments")[0]
		ids := append(append([]string(nil), ok...), big)

		// The first attempt of the big one is refused and counted: nacked, the breaker armed.
		errs := b.handleAll(ids)
		for i, err := range errs[:len(ok)] {
			require.NoError(t, err, "ordinary message %d of the batch is delivered and acked", i)
		}
		require.Error(t, errs[len(ok)], "one retry is left for the refused one")
		requireEachOnce(t, b.published.to("payments"), ok)
		require.Equal(t, 1, b.peek(t, big).FailureCount)
		require.Empty(t, b.peek(t, big).Parked)

		// The last attempt is refused, and so is the error queue's copy: parked and acked.
		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(big)), "a parked timeout's announcement is acked")
		parked := b.peek(t, big)
		require.Contains(t, parked.Parked, `forwarding to "payments" failed after 2 attempts`)
		require.Contains(t, parked.Parked, "PRECONDITION_FAILED", "the forward's error")
		require.Contains(t, parked.Parked, fmt.Sprintf("the error queue %q refused its copy too", wire.DefaultErrorQueue))
		require.Equal(t, int64(1), b.parked.Load(), "OnParked told once")
		require.Empty(t, b.published.to(wire.DefaultErrorQueue))
		st, err := b.store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Equal(t, 1, st.Pending)
		require.Equal(t, 1, st.Parked)
		require.Zero(t, st.DueNow+st.Claimed, "a parked timeout is neither due nor claimed")

		// A redelivered announcement of a parked timeout is acked without a forward.
		refusals := b.published.refusals.Load()
		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(big)))
		require.Equal(t, refusals, b.published.refusals.Load(), "a parked timeout is not forwarded")

		require.False(t, b.breaker.Armed(), "the parking ended the failures that led to it")
		time.Sleep(2 * wait) // advances fake time past the breaker's wait
		require.Empty(t, b.trips.all(), "no critical error: the endpoint goes on")
		later := b.storeDue(t, 1, 10, "payments")
		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(later[0])))
		require.Len(t, b.published.to("payments"), len(ok)+1, "and still delivers")
	})
}

func TestUnforwardableTimeoutIsParkedOnItsFirstAttemptByDefault(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupPark(t, time.Hour, nil)
		big := b.storeDue(t, 1, bigPayload, "payments")[0]
		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(big)))
		parked := b.peek(t, big)
		require.Contains(t, parked.Parked, "after 1 attempt:")
		require.Equal(t, 1, parked.FailureCount)
		require.False(t, b.breaker.Armed())
	})
}

// A refused error-queue copy that says nothing of the message is retried, never parked.
func TestErrorQueueFailingWithTheConnectionOrAContextDoesNotPark(t *testing.T) {
	t.Parallel()
	for name, sendErr := range map[string]error{
		"closed channel":    amqp.ErrClosed,
		"connection forced": &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - shutdown"},
		"deadline":          fmt.Errorf("waiting for the confirm: %w", context.DeadlineExceeded),
		"cancelled":         fmt.Errorf("publishing: %w", context.Canceled),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupPark(t, time.Hour, nil)
			b.published.errorQueueErr = sendErr
			big := b.storeDue(t, 1, bigPayload, "payments")[0]
			for n := range 3 {
				err := b.dispatch.Handle(dispatcherqueue.Encode(big))
				require.ErrorIs(t, err, sendErr, "delivery %d nacked, retried", n)
			}
			require.Empty(t, b.peek(t, big).Parked)
			require.Zero(t, b.parked.Load())
			require.True(t, b.breaker.Armed(), "counted by the dispatch breaker, as before parking")
		})
	}
}

// A store that is not a persistence.Parker keeps the behaviour from before parking: nacked and
// retried at the breaker's pace until the breaker trips.
func TestStoreWithoutParkerRetriesUntilTheBreakerTrips(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const wait = 300 * time.Millisecond
		trips := &tripLog{}
		b := setupDispatch(t, func(c *satellites.DispatchConfig) {
			breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
				Name: "dispatch", TimeToWait: wait, Message: critical.DispatchMessage,
				RetryDelay: 20 * time.Millisecond, OnTrip: trips.record,
			})
			require.NoError(t, err)
			t.Cleanup(breaker.Stop)
			c.Breaker = breaker
			p := &sizeLimitPublisher{}
			c.Publisher, c.ErrorQueue = p, errorqueue.New(p, "")
		})
		_, isParker := any(b.store).(persistence.Parker)
		require.False(t, isParker)
		timeout := persistence.Timeout{ID: watermill.NewUUID(), Destination: "payments", Due: time.Now(), Payload: make([]byte, bigPayload)}
		_, err := b.store.Store(context.Background(), timeout)
		require.NoError(t, err)

		start := time.Now()
		for len(trips.all()) == 0 {
			require.Less(t, time.Since(start), time.Minute, "the breaker trips")
			err := b.dispatch.Handle(dispatcherqueue.Encode(timeout.ID))
			require.ErrorContains(t, err, "PRECONDITION_FAILED", "nacked")
		}
		require.Contains(t, trips.all()[0].Message, critical.DispatchMessage)
		kept, err := b.store.Peek(context.Background(), timeout.ID)
		require.NoError(t, err, "kept")
		require.Empty(t, kept.Parked)
	})
}

func TestParkFailingIsRetriedAtTheBreakersPace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupPark(t, time.Hour, nil)
		errDown := errors.New("store refused the update")
		b.store.failParks(errDown)
		big := b.storeDue(t, 1, bigPayload, "payments")[0]

		err := b.dispatch.Handle(dispatcherqueue.Encode(big))
		require.ErrorIs(t, err, errDown, "nacked")
		require.ErrorContains(t, err, "PRECONDITION_FAILED", "the error names why it was to be parked")
		require.True(t, b.breaker.Armed(), "counted as a dispatch failure")
		require.Empty(t, b.peek(t, big).Parked)
		require.Zero(t, b.parked.Load())

		b.store.failParks(nil)
		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(big)), "the redelivery parks it")
		require.NotEmpty(t, b.peek(t, big).Parked)
		require.Equal(t, 2, b.peek(t, big).FailureCount, "each attempt counted")
		require.False(t, b.breaker.Armed())
	})
}

// sizeLimitForwarder is a BatchForwarder, as the exactly-once forwarder is, that refuses a batch
// holding a message of bigPayload bytes or more.
type sizeLimitForwarder struct {
	store     *parkingStore
	mu        sync.Mutex
	forwarded []string
}

func (f *sizeLimitForwarder) Forward(ctx context.Context, t persistence.Timeout, msg *message.Message) (bool, error) {
	removed, err := f.ForwardMany(ctx, []public.Forwarding{{Timeout: t, Message: msg}})
	return len(removed) == 1, err
}

func (f *sizeLimitForwarder) ForwardMany(ctx context.Context, fs []public.Forwarding) ([]string, error) {
	ids := make([]string, len(fs))
	for i, x := range fs {
		if len(x.Message.Payload) >= bigPayload {
			return nil, errors.New("pq: invalid memory alloc request size")
		}
		ids[i] = x.Timeout.ID
	}
	removed, err := f.store.RemoveMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forwarded = append(f.forwarded, removed...)
	return removed, nil
}

func TestUnforwardableTimeoutIsParkedThroughABatchForwarder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fwd := &sizeLimitForwarder{}
		b := setupPark(t, time.Hour, func(c *satellites.DispatchConfig) {
			fwd.store = c.Store.(*parkingStore)
			c.Forwarder = fwd
		})
		ok := b.storeDue(t, 30, 10, "payments")
		big := b.storeDue(t, 1, bigPayload, "payments")[0]

		for i, err := range b.handleAll(append(append([]string(nil), ok...), big)) {
			require.NoError(t, err, "message %d acked", i)
		}
		fwd.mu.Lock()
		require.ElementsMatch(t, ok, fwd.forwarded, "the others of the batch are forwarded")
		fwd.mu.Unlock()
		parked := b.peek(t, big)
		require.Contains(t, parked.Parked, "invalid memory alloc request size")
		require.Contains(t, parked.Parked, "PRECONDITION_FAILED", "the error queue's refusal")
		require.False(t, b.breaker.Armed())
	})
}

// A message moved to the error queue after its retries is handled: the failures counted on the way
// there leave the dispatch breaker disarmed, as parking does.
func TestMovingToTheErrorQueueDisarmsTheBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupPark(t, time.Hour, func(c *satellites.DispatchConfig) { c.NumberOfRetries = 2 })
		b.published.refuse("payments")
		ids := b.storeDue(t, 1, 10, "payments")

		for range 2 {
			require.Error(t, b.dispatch.Handle(dispatcherqueue.Encode(ids[0])), "a retry: nacked")
		}
		require.True(t, b.breaker.Armed(), "the retries are counted")
		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(ids[0])), "the third attempt moves it to the error queue")
		require.False(t, b.breaker.Armed(), "moved to the error queue: handled")
		require.Zero(t, b.parked.Load())
	})
}
