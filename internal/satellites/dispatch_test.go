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

func TestMalformedDispatcherMessageGoesToTheErrorQueueAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDispatch(t, nil)
		require.NoError(t, b.dispatch.Handle(message.NewMessage(watermill.NewUUID(), []byte("bad\x00id"))))
		failed := b.published.only(t, wire.DefaultErrorQueue)
		require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), "control character")
	})
}

// An announcement that says when its ids are due is held until then. The store is read only then:
// the timeout is not forwarded before due. A Cancel during the hold still wins.
func TestAnnouncementAheadIsHeldUntilItsDueTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDispatch(t, nil)
		due := time.Now().Add(150 * time.Millisecond)
		kept := b.storeClaimedAt(t, "payments", due)
		cancelled := b.storeClaimedAt(t, "refunds", due)

		done := make(chan error, 1)
		go func() { done <- b.dispatch.Handle(announcedAhead(cancelled.ID, due)) }()
		keptDone := make(chan error, 1)
		go func() { keptDone <- b.dispatch.Handle(announcedAhead(kept.ID, due)) }()
		synctest.Wait() // both announcements are held; fake time stands still meanwhile
		require.Empty(t, b.published.to("payments"), "nothing forwarded during the hold")
		_, err := b.store.Remove(context.Background(), cancelled.ID)
		require.NoError(t, err)
		require.NoError(t, <-keptDone)
		require.False(t, time.Now().Before(due), "handled %s before due", time.Until(due))
		out := b.published.only(t, "payments")
		require.Equal(t, kept.ID, out.UUID)
		require.NoError(t, <-done)
		require.Empty(t, b.published.to("refunds"), "cancelled while its announcement was held: not forwarded")
	})
}

// An announcement further ahead than the hold's bound is looked up at once. Its timeout, not due,
// stays in the store (given back where the store can). It is never forwarded early.
func TestAnnouncementFarAheadIsNotHeldAndNotForwardedEarly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDispatch(t, nil)
		due := time.Now().Add(10 * time.Second)
		timeout := b.storeClaimedAt(t, "payments", due)

		returned := make(chan error, 1)
		go func() { returned <- b.dispatch.Handle(announcedAhead(timeout.ID, due)) }()
		select {
		case err := <-returned:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("held an announcement 10 s ahead")
		}
		require.Empty(t, b.published.to("payments"))
		_, err := b.store.Peek(context.Background(), timeout.ID)
		require.NoError(t, err, "kept in the store, to be claimed again when due")
	})
}

// A stop during the hold nacks the announcement without reading the store: the timeout stays, to be
// dispatched from the redelivered announcement or given back.
func TestStopDuringTheHoldNacksTheAnnouncement(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDispatch(t, nil)
		due := time.Now().Add(500 * time.Millisecond)
		timeout := b.storeClaimedAt(t, "payments", due)

		msg := announcedAhead(timeout.ID, due)
		ctx, cancel := context.WithCancel(context.Background())
		msg.SetContext(ctx)
		time.AfterFunc(30*time.Millisecond, cancel)
		err := b.dispatch.Handle(msg)
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, b.published.to("payments"))
		_, err = b.store.Peek(context.Background(), timeout.ID)
		require.NoError(t, err, "still stored")
	})
}

// A dispatch.at that is not a time is a malformed message: the error queue, with the reason.
func TestMalformedDispatchAtGoesToTheErrorQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDispatch(t, nil)
		timeout := b.storeDue(t, "payments")
		msg := dispatcherqueue.Encode(timeout.ID)
		msg.Metadata.Set(dispatcherqueue.HeaderDispatchAt, "tomorrow")
		require.NoError(t, b.dispatch.Handle(msg))
		failed := b.published.only(t, wire.DefaultErrorQueue)
		require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), dispatcherqueue.HeaderDispatchAt)
		require.Empty(t, b.published.to("payments"))
	})
}

// The hold and the due check read the store's clock (DispatchConfig.Now), not the process's. Here
// the store's clock is 300 ms behind this process's. An announcement due by a time this process has
// passed is held until the store's clock passes it. A timeout due on this process's clock but not
// on the store's is not forwarded.
func TestHoldAndDueCheckFollowTheStoresClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const behind = 300 * time.Millisecond
		storeNow := func() time.Time { return time.Now().Add(-behind) }
		b := setupDispatch(t, func(c *satellites.DispatchConfig) { c.Now = storeNow })

		due := time.Now().Add(-100 * time.Millisecond) // passed here, 200 ms ahead on the store's clock
		held := b.storeClaimedAt(t, "payments", due)
		require.NoError(t, b.dispatch.Handle(announcedAhead(held.ID, due)))
		require.False(t, storeNow().Before(due), "handled %s before due on the store's clock", due.Sub(storeNow()))
		require.Equal(t, held.ID, b.published.only(t, "payments").UUID)

		notDue := b.storeClaimedAt(t, "refunds", time.Now().Add(-100*time.Millisecond))
		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(notDue.ID)))
		require.Empty(t, b.published.to("refunds"), "not due on the store's clock: not forwarded")
		_, err := b.store.Peek(context.Background(), notDue.ID)
		require.NoError(t, err, "kept in the store, to be claimed again when due")
	})
}

func TestBatchDispatchForwardsEachOnceAndRemovesIt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
}

func TestBatchDispatchAcksARedeliveryHandledAtTheSameTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
}

func TestBatchDispatchFallsBackToOneByOneWhenTheBatchLookUpFails(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, nil)
		b.store.peekErr = errors.New("statement too long")
		ids := b.storeDue(t, 50, "payments")

		for _, err := range b.handleAll(ids) {
			require.NoError(t, err)
		}
		require.Len(t, b.published.to("payments"), len(ids))
	})
}

func TestBatchDispatchRemovesOneByOneWhenTheBatchRemovalFails(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
}

func TestBatchDispatchCountsAFailedForwardForEachMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
}

func TestBatchDispatchOfAMissingTimeoutAcksIt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, nil)
		ids := append(b.storeDue(t, 10, "payments"), "gone-1", "gone-2")
		for _, err := range b.handleAll(ids) {
			require.NoError(t, err)
		}
		require.Len(t, b.published.to("payments"), 10)
	})
}

func TestMaxBatchOneDispatchesEachAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
}

// Two announcements of one id may be handled at once, in batches side by side. That happens when an
// id is announced again after a restart gave its claim back. The id is forwarded once: the second
// batch waits for the first, then finds it gone. The other ids of the second batch go on meanwhile.
func TestBatchDispatchNeverForwardsOneIDInTwoBatchesAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
		synctest.Wait() // the first batch waits at the gate, the second for the id the first holds
		require.Len(t, published.to("fast"), len(others), "the second batch's other ids forwarded while the first batch waits")
		select {
		case <-second:
			t.Fatal("the second batch did not wait for the id the first batch holds")
		default:
		}
		close(published.gate)
		require.NoError(t, <-first)
		require.NoError(t, <-second)
		require.Len(t, published.to("slow"), 1, "the id announced twice is forwarded once")
		st, err := b.store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending)
	})
}

// TestManyIDMessageIsDispatchedAsABatch: the ids of one message are looked up together, forwarded
// with one publish per destination, removed together, and the message is acked once.
func TestManyIDMessageIsDispatchedAsABatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, nil)
		pay := b.storeDue(t, 100, "payments")
		ship := b.storeDue(t, 100, "shipping")

		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(append(append([]string(nil), pay...), ship...)...)))
		requireEachOnce(t, b.published.to("payments"), pay)
		requireEachOnce(t, b.published.to("shipping"), ship)
		for _, m := range b.published.to("payments") {
			require.Equal(t, m.UUID, m.Metadata.Get("trace-id"), "headers kept")
			require.Empty(t, m.Metadata.Get(wire.HeaderExpire), "routing headers dropped")
		}
		st, err := b.store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending, "every forwarded timeout removed")
		b.store.mu.Lock()
		defer b.store.mu.Unlock()
		require.Equal(t, 1, b.store.peekCalls, "one look-up for the message")
		require.Equal(t, 1, b.store.removeCalls, "one removal for the message")
		require.Equal(t, 2, b.published.publishCalls(), "one publish per destination")
	})
}

// TestManyIDMessagesBeyondMaxBatch: a message with more ids than MaxBatch is dispatched in several
// batches, each id once; one-id messages handled at the same time join them.
func TestManyIDMessagesBeyondMaxBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, func(c *satellites.DispatchConfig) { c.MaxBatch = 64 })
		many := b.storeDue(t, 300, "payments")
		single := b.storeDue(t, 40, "payments")

		var wg sync.WaitGroup
		var manyErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			manyErr = b.dispatch.Handle(dispatcherqueue.Encode(many...))
		}()
		for _, err := range b.handleAll(single) {
			require.NoError(t, err, "an older poller's one-id message")
		}
		wg.Wait()
		require.NoError(t, manyErr)
		requireEachOnce(t, b.published.to("payments"), append(append([]string(nil), many...), single...))
		b.store.mu.Lock()
		defer b.store.mu.Unlock()
		require.GreaterOrEqual(t, b.store.peekCalls, (300+63)/64, "no batch above MaxBatch")
	})
}

// TestManyIDMessagePartlyFailedIsRedeliveredWithoutDuplicates: when some ids of a message fail to
// forward, the message is nacked; its redelivery forwards those and skips the ids already forwarded
// and removed.
func TestManyIDMessagePartlyFailedIsRedeliveredWithoutDuplicates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, func(c *satellites.DispatchConfig) { c.NumberOfRetries = 3 })
		b.published.refuse("payments")
		pay := b.storeDue(t, 20, "payments")
		ship := b.storeDue(t, 30, "shipping")
		msg := dispatcherqueue.Encode(append(append([]string(nil), ship...), pay...)...)

		err := b.dispatch.Handle(msg)
		require.ErrorContains(t, err, "20 of the 50 due ids", "nacked for another attempt")
		requireEachOnce(t, b.published.to("shipping"), ship)
		for _, id := range pay {
			kept, err := b.store.Peek(context.Background(), id)
			require.NoError(t, err, "kept for the redelivery")
			require.Equal(t, 1, kept.FailureCount, "one attempt counted")
		}

		b.published.accept("payments")
		require.NoError(t, b.dispatch.Handle(msg), "the redelivery")
		requireEachOnce(t, b.published.to("payments"), pay)
		requireEachOnce(t, b.published.to("shipping"), ship)
		require.Empty(t, b.published.to(wire.DefaultErrorQueue))
		st, err := b.store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending)
	})
}

// TestManyIDMessageWhoseRemovalFailedIsNotForwardedAgain: a removal that fails for the batch is
// retried id by id; the message is acked and nothing is forwarded twice.
func TestManyIDMessageWhoseRemovalFailedIsNotForwardedAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, nil)
		b.store.removeErr = errors.New("connection reset")
		ids := b.storeDue(t, 40, "payments")
		msg := dispatcherqueue.Encode(ids...)
		require.NoError(t, b.dispatch.Handle(msg))
		require.NoError(t, b.dispatch.Handle(msg), "a duplicate delivery of the message")
		requireEachOnce(t, b.published.to("payments"), ids)
	})
}

// TestPoisonInAManyIDMessageGoesToTheErrorQueueAlone: one unreadable timeout among the ids goes to
// the error queue, as a message of its own id. The others are delivered, and the message acked.
func TestPoisonInAManyIDMessageGoesToTheErrorQueueAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDispatch(t, nil)
		var ids []string
		for range 10 {
			ids = append(ids, b.storeDue(t, "payments").ID)
		}
		poison := ids[4]
		b.store.corrupt(poison)

		msg := dispatcherqueue.Encode(ids...)
		require.NoError(t, b.dispatch.Handle(msg))
		failed := b.published.only(t, wire.DefaultErrorQueue)
		require.Equal(t, poison, string(failed.Payload), "the poison id alone")
		require.Empty(t, failed.Metadata.Get(dispatcherqueue.HeaderDispatchIDs), "in the one-id format")
		require.NotEqual(t, msg.UUID, failed.UUID)
		require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), "cannot be read from the store")
		requireEachOnce(t, b.published.to("payments"), append(append([]string(nil), ids[:4]...), ids[5:]...))
		_, err := b.store.Peek(context.Background(), poison)
		require.ErrorIs(t, err, persistence.ErrCorruptMetadata, "still unreadable")
		ok, err := b.store.Remove(context.Background(), poison)
		require.NoError(t, err)
		require.False(t, ok, "removed from the store")
	})
}

// TestMalformedManyIDMessageGoesToTheErrorQueueWhole: a message whose ids cannot all be read is
// moved to the error queue as it is; nothing in it is dispatched.
func TestMalformedManyIDMessageGoesToTheErrorQueueWhole(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, nil)
		ids := b.storeDue(t, 3, "payments")
		msg := dispatcherqueue.Encode(ids...)
		msg.Metadata.Set(dispatcherqueue.HeaderDispatchIDs, "4")
		require.NoError(t, b.dispatch.Handle(msg))
		failed := b.published.to(wire.DefaultErrorQueue)
		require.Len(t, failed, 1)
		require.Equal(t, msg.UUID, failed[0].UUID)
		require.Contains(t, failed[0].Metadata.Get(wire.HeaderFailureReason), "says 4 ids, the payload holds 3")
		require.Empty(t, b.published.to("payments"))
	})
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
	synctest.Test(t, func(t *testing.T) {
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
	})
}

func TestFailingToRecordFailuresTripsTheRecoveryBreakerAndKeepsTheMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
}

func TestForwardFailingDuringTheStopIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
}

func TestForwardThatMayHaveBeenDiscardedKeepsItsTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDispatch(t, func(c *satellites.DispatchConfig) { c.Interrupted = func() bool { return true } })
		timeout := b.storeDue(t, "payments")

		err := b.dispatch.Handle(dispatcherqueue.Encode(timeout.ID))
		require.ErrorIs(t, err, context.Canceled)
		require.Len(t, b.published.to("payments"), 1, "it was published")
		_, err = b.store.Peek(context.Background(), timeout.ID)
		require.NoError(t, err, "but not removed: the Pub/Sub may have discarded it")
	})
}
