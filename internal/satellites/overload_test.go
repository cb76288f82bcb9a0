package satellites_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// lateConfirmPublisher is a broker under load: a publish to topic gets its confirms after
// confirmIn, or never when confirmIn is 0. The broker takes the messages either way, so a publish
// given up on before its confirms has still delivered them.
type lateConfirmPublisher struct {
	recordingPublisher
	topic     string
	confirmIn time.Duration
}

func (p *lateConfirmPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic != p.topic {
		return p.recordingPublisher.Publish(topic, msgs...)
	}
	if err := p.recordingPublisher.Publish(topic, msgs...); err != nil {
		return err
	}
	var confirmed <-chan time.Time
	if p.confirmIn > 0 {
		confirmed = time.After(p.confirmIn) // fake time in the tests' bubbles
	}
	select {
	case <-confirmed:
		return nil
	case <-msgs[0].Context().Done():
		return fmt.Errorf("waiting for the confirm of message %s: %w", msgs[0].UUID, msgs[0].Context().Err())
	}
}

// inFlight counts the calls in flight and the most there were at once.
type inFlight struct{ now, max atomic.Int32 }

// enter counts a call in; the function it returns counts it out.
func (f *inFlight) enter() (leave func()) {
	n := f.now.Add(1)
	for {
		m := f.max.Load()
		if n <= m || f.max.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { f.now.Add(-1) }
}

// slowRecordStore is a memory store whose IncrementFailureCount takes a while, as a row update
// on a busy database does. It counts the calls and the most in flight at once.
type slowRecordStore struct {
	memStore
	calls    atomic.Int32
	inFlight inFlight
}

func (s *slowRecordStore) IncrementFailureCount(ctx context.Context, id string) (bool, error) {
	s.calls.Add(1)
	defer s.inFlight.enter()()
	time.Sleep(50 * time.Millisecond) // fake time in the tests' bubbles: the update's round trip
	return s.memStore.IncrementFailureCount(ctx, id)
}

type overloadBundle struct {
	dispatch  *satellites.Dispatch
	store     *slowRecordStore
	trips     *tripLog // the dispatch breaker's and the recovery breaker's
	alone     atomic.Int32
	published interface {
		message.Publisher
		to(topic string) []*message.Message
	}
}

// setupOverload returns a dispatch satellite with the service's breaker settings: a 10 s call
// timeout, a 30 s wait, and a recovery breaker of 1 failure a second.
func setupOverload(t *testing.T, pub interface {
	message.Publisher
	to(topic string) []*message.Message
}, numberOfRetries int) *overloadBundle {
	t.Helper()
	b := &overloadBundle{store: &slowRecordStore{memStore: memory.New().(memStore)}, trips: &tripLog{}, published: pub}
	dispatchBreaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "dispatch", TimeToWait: 30 * time.Second, CallTimeout: 10 * time.Second, Message: critical.DispatchMessage,
		RetryDelay: time.Second, OnTrip: b.trips.record,
	})
	require.NoError(t, err)
	t.Cleanup(dispatchBreaker.Stop)
	recovery, err := breaker.NewRateBreaker(breaker.RateBreakerConfig{
		Name: "recovery", MaxFailuresPerSecond: 1, Message: critical.RecoveryMessage, OnTrip: b.trips.record,
	})
	require.NoError(t, err)
	b.dispatch, err = satellites.NewDispatch(satellites.DispatchConfig{
		Endpoint: endpoint, Store: b.store, Publisher: pub, ErrorQueue: errorqueue.New(pub, ""),
		Breaker: dispatchBreaker, RecoveryBreaker: recovery, NumberOfRetries: numberOfRetries,
		OnRepublishedAlone: func(n int) { b.alone.Add(int32(n)) },
	}, watermill.NopLogger{})
	require.NoError(t, err)
	return b
}

func (b *overloadBundle) storeDue(t *testing.T, n int, destination string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = watermill.NewUUID()
		_, err := b.store.Store(context.Background(), persistence.Timeout{ID: ids[i], Destination: destination, Due: time.Now(), Payload: []byte("charge")})
		require.NoError(t, err)
	}
	return ids
}

// requireNonePending fails unless the store holds no timeout: each was removed or moved on.
func (b *overloadBundle) requireNonePending(t *testing.T, msgAndArgs ...any) {
	t.Helper()
	st, err := b.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.Zero(t, st.Pending, msgAndArgs...)
}

func TestForwardWaitsForAConfirmLaterThanTheCallTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Confirms 20 s late: past the 10 s call timeout, within the dispatch breaker's 30 s wait.
		pub := &lateConfirmPublisher{topic: "payments", confirmIn: 20 * time.Second}
		b := setupOverload(t, pub, 0)
		ids := b.storeDue(t, 40, "payments")

		for i, err := range handleAtOnce(b.dispatch, ids) {
			require.NoError(t, err, "dispatcher message %d", i)
		}
		requireEachOnce(t, pub.to("payments"), ids)
		b.requireNonePending(t, "removed once confirmed")
		require.Zero(t, b.store.calls.Load(), "no failure recorded")
		require.Empty(t, b.trips.all())
	})
}

func TestUnconfirmedBatchCountsNoAttemptAndIsNotRepublishedAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Never confirmed: the broker is overloaded or out of reach, no message is at fault.
		pub := &lateConfirmPublisher{topic: "payments"}
		b := setupOverload(t, pub, 0)
		ids := b.storeDue(t, 60, "payments")

		start := time.Now()
		for i, err := range handleAtOnce(b.dispatch, ids) {
			require.ErrorIs(t, err, context.DeadlineExceeded, "dispatcher message %d is nacked", i)
		}
		require.GreaterOrEqual(t, time.Since(start), 30*time.Second, "the confirms were waited for as long as the breaker's wait, not the call timeout")
		require.Len(t, pub.to("payments"), len(ids), "each published once: none again alone")
		require.Zero(t, b.alone.Load())
		require.Zero(t, b.store.calls.Load(), "no attempt recorded: with NumberOfRetries 0 an attempt would send each to the error queue")
		require.Empty(t, pub.to(wire.DefaultErrorQueue))
		for _, id := range ids {
			kept, err := b.store.Peek(context.Background(), id)
			require.NoError(t, err, "kept for the redelivery")
			require.Zero(t, kept.FailureCount)
		}
		// A broker that confirms nothing for the dispatch breaker's wait trips it, as before: by its
		// watch over the calls in flight or by the failure they end with, whichever fires first at
		// that instant. The recovery breaker heard of no failure.
		for _, trip := range b.trips.all() {
			require.Equal(t, "dispatch", trip.Breaker)
		}

		// The broker catches up: the redeliveries forward them.
		pub.confirmIn = time.Millisecond
		for _, err := range handleAtOnce(b.dispatch, ids) {
			require.NoError(t, err)
		}
		b.requireNonePending(t)
	})
}

func TestRefusedBatchIsCountedAndRecordsItsFailuresAFewAtATime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pub := &recordingPublisher{}
		pub.refuse("payments")
		b := setupOverload(t, pub, 1)
		ids := b.storeDue(t, 100, "payments")

		// Two many-id messages, as a poller announces them: two batches.
		msgs := []*message.Message{dispatcherqueue.Encode(ids[:50]...), dispatcherqueue.Encode(ids[50:]...)}
		errs := make([]error, len(msgs))
		var wg sync.WaitGroup
		for i, msg := range msgs {
			wg.Go(func() { errs[i] = b.dispatch.Handle(msg) })
		}
		wg.Wait()
		for _, err := range errs {
			require.Error(t, err, "a refused forward is nacked for another attempt")
		}
		require.Equal(t, int32(len(ids)), b.alone.Load(), "every message of the refused batches was published again alone")
		require.Equal(t, int32(len(ids)), b.store.calls.Load(), "one attempt recorded for each")
		require.LessOrEqual(t, b.store.inFlight.max.Load(), int32(4), "failures recorded a few at a time, not %d at once", len(ids))
		for _, id := range ids {
			kept, err := b.store.Peek(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, 1, kept.FailureCount)
		}
		require.Empty(t, b.trips.all())
	})
}

// slowRemoveStore is a memory store whose removal of many fails, as a batch past its deadline
// does, and whose removal of one takes a while. It counts the most removals in flight at once.
type slowRemoveStore struct {
	memStore
	inFlight inFlight
}

func (s *slowRemoveStore) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) > 1 {
		return nil, context.DeadlineExceeded
	}
	defer s.inFlight.enter()()
	time.Sleep(50 * time.Millisecond) // fake time in the tests' bubbles: the delete's round trip
	return s.memStore.RemoveMany(ctx, ids)
}

func TestFailedBatchRemovalRemovesAFewAtATime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &slowRemoveStore{memStore: memory.New().(memStore)}
		pub := &recordingPublisher{}
		dispatchBreaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
			Name: "dispatch", TimeToWait: 30 * time.Second, Message: critical.DispatchMessage, OnTrip: func(*critical.Error) {},
		})
		require.NoError(t, err)
		t.Cleanup(dispatchBreaker.Stop)
		d, err := satellites.NewDispatch(satellites.DispatchConfig{
			Endpoint: endpoint, Store: store, Publisher: pub, ErrorQueue: errorqueue.New(pub, ""), Breaker: dispatchBreaker,
		}, watermill.NopLogger{})
		require.NoError(t, err)
		ids := make([]string, 100)
		for i := range ids {
			ids[i] = watermill.NewUUID()
			_, err := store.Store(context.Background(), persistence.Timeout{ID: ids[i], Destination: "payments", Due: time.Now()})
			require.NoError(t, err)
		}

		require.NoError(t, d.Handle(dispatcherqueue.Encode(ids...)))
		requireEachOnce(t, pub.to("payments"), ids)
		st, err := store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending, "each removed alone")
		require.LessOrEqual(t, store.inFlight.max.Load(), int32(16), "removed a few at a time, not %d at once", len(ids))
	})
}

// stuckMessagePublisher confirms every publish to topic at once but one that holds the message
// stuck, which it takes and never confirms: a message of many megabytes on a slow link, say.
type stuckMessagePublisher struct {
	recordingPublisher
	topic, stuck string
}

func (p *stuckMessagePublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.recordingPublisher.Publish(topic, msgs...); err != nil || topic != p.topic {
		return err
	}
	for _, m := range msgs {
		if m.UUID == p.stuck {
			<-msgs[0].Context().Done()
			return fmt.Errorf("waiting for the confirm of message %s: %w", m.UUID, msgs[0].Context().Err())
		}
	}
	return nil
}

// confirmOther forwards one more timeout that the broker confirms: traffic beside a stuck message.
func (b *overloadBundle) confirmOther(t *testing.T) {
	t.Helper()
	require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(b.storeDue(t, 1, "payments")...)))
}

// TestAMessageNeverConfirmedIsNotRetriedForever: a message the broker never confirms, while it
// confirms the others, is at first taken for the broker's slowness (no attempt counted). After
// a few unconfirmed forwards in a row its batch, if it has others, is published alone: they are
// delivered, and the stuck one counts an attempt, which with NumberOfRetries 0 sends it to the
// error queue with the reason. Every dispatcher message settles within a few redeliveries.
func TestAMessageNeverConfirmedIsNotRetriedForever(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pub := &stuckMessagePublisher{topic: "payments"}
		b := setupOverload(t, pub, 0)
		ids := b.storeDue(t, 10, "payments")
		pub.stuck = ids[3]

		pending, rounds := ids, 0
		for ; len(pending) > 0 && rounds < 10; rounds++ { // each nacked dispatcher message is redelivered
			var next []string
			for i, err := range handleAtOnce(b.dispatch, pending) {
				if err != nil {
					next = append(next, pending[i])
				}
			}
			pending = next
			b.confirmOther(t)
		}
		require.Empty(t, pending, "every dispatcher message settled (after %d rounds)", rounds)
		require.LessOrEqual(t, rounds, 4, "a few unconfirmed forwards, then the batch alone")

		failed := pub.to(wire.DefaultErrorQueue)
		require.Len(t, failed, 1, "only the stuck message goes to the error queue")
		require.Equal(t, pub.stuck, failed[0].UUID)
		require.Contains(t, failed[0].Metadata.Get(wire.HeaderFailureReason), "not confirmed in time")
		delivered := map[string]bool{}
		for _, m := range pub.to("payments") {
			delivered[m.UUID] = true
		}
		for _, id := range ids {
			require.True(t, delivered[id], "%s was published to its destination", id)
		}
		b.requireNonePending(t, "the delivered ones removed, the stuck one moved to the error queue")
	})
}

// TestAStuckMessageSharingABatchIsPublishedAlone: the due ids come in one dispatcher message, so
// the stuck message shares its batch. After a few unconfirmed forwards in a row the batch is
// published alone: the others are delivered and removed, the stuck one goes to the error queue.
func TestAStuckMessageSharingABatchIsPublishedAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pub := &stuckMessagePublisher{topic: "payments"}
		b := setupOverload(t, pub, 0)
		ids := b.storeDue(t, 10, "payments")
		pub.stuck = ids[3]

		rounds := 1
		for ; b.dispatch.Handle(dispatcherqueue.Encode(ids...)) != nil && rounds < 10; rounds++ { // redelivered while nacked
			b.confirmOther(t)
		}
		require.Less(t, rounds, 10, "the dispatcher message settled")
		require.NotZero(t, b.alone.Load(), "the batch was published again alone")
		failed := pub.to(wire.DefaultErrorQueue)
		require.Len(t, failed, 1, "only the stuck message goes to the error queue")
		require.Equal(t, pub.stuck, failed[0].UUID)
		b.requireNonePending(t)
	})
}

// TestABrokerThatConfirmsNothingSuspectsNoMessage: with no forward confirmed at all, repeated
// unconfirmed forwards are the broker's outage, which the dispatch breaker answers: no attempt is
// counted, nothing goes to the error queue, however many times the message is redelivered.
func TestABrokerThatConfirmsNothingSuspectsNoMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pub := &stuckMessagePublisher{topic: "payments"}
		b := setupOverload(t, pub, 0)
		ids := b.storeDue(t, 1, "payments")
		pub.stuck = ids[0]
		for range 2 * 3 { // twice the forwards in a row that suspect a message
			require.ErrorIs(t, b.dispatch.Handle(dispatcherqueue.Encode(ids...)), context.DeadlineExceeded)
		}
		require.Empty(t, pub.to(wire.DefaultErrorQueue))
		kept, err := b.store.Peek(context.Background(), ids[0])
		require.NoError(t, err)
		require.Zero(t, kept.FailureCount, "no attempt counted")
		require.Zero(t, b.alone.Load())
	})
}
