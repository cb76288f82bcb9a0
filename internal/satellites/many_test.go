package satellites_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

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

// TestManyIDMessageIsDispatchedAsABatch: the ids of one message are looked up together,
// forwarded with one publish per destination, removed together, and the message is acked once.
func TestManyIDMessageIsDispatchedAsABatch(t *testing.T) {
	t.Parallel()
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
}

// TestManyIDMessagesBeyondMaxBatch: a message with more ids than MaxBatch is dispatched in
// several batches, each id once; one-id messages handled at the same time join them.
func TestManyIDMessagesBeyondMaxBatch(t *testing.T) {
	t.Parallel()
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
}

// TestManyIDMessagePartlyFailedIsRedeliveredWithoutDuplicates: when some ids of a message fail
// to forward, the message is nacked; its redelivery forwards those and skips the ids already
// forwarded and removed.
func TestManyIDMessagePartlyFailedIsRedeliveredWithoutDuplicates(t *testing.T) {
	t.Parallel()
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
}

// TestManyIDMessageWhoseRemovalFailedIsNotForwardedAgain: a removal that fails for the batch is
// retried id by id; the message is acked and nothing is forwarded twice.
func TestManyIDMessageWhoseRemovalFailedIsNotForwardedAgain(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, nil)
	b.store.removeErr = errors.New("connection reset")
	ids := b.storeDue(t, 40, "payments")
	msg := dispatcherqueue.Encode(ids...)
	require.NoError(t, b.dispatch.Handle(msg))
	require.NoError(t, b.dispatch.Handle(msg), "a duplicate delivery of the message")
	requireEachOnce(t, b.published.to("payments"), ids)
}

// TestPoisonInAManyIDMessageGoesToTheErrorQueueAlone: one unreadable timeout among the ids of a
// message goes to the error queue as a message of its own id, the others are delivered, and the
// message is acked.
func TestPoisonInAManyIDMessageGoesToTheErrorQueueAlone(t *testing.T) {
	t.Parallel()
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
}

// TestMalformedManyIDMessageGoesToTheErrorQueueWhole: a message whose ids cannot all be read is
// moved to the error queue as it is; nothing in it is dispatched.
func TestMalformedManyIDMessageGoesToTheErrorQueueWhole(t *testing.T) {
	t.Parallel()
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
}

// TestManyIDMessageThroughABatchForwarder: the ids of one message are forwarded in one
// ForwardMany, each exactly once, redelivery included.
func TestManyIDMessageThroughABatchForwarder(t *testing.T) {
	t.Parallel()
	fwd := &txBatchForwarder{}
	b := setupBatchForwarder(t, fwd)
	ids := b.storeDue(t, 50, "payments")
	msg := dispatcherqueue.Encode(ids...)
	require.NoError(t, b.dispatch.Handle(msg))
	require.NoError(t, b.dispatch.Handle(msg), "a redelivery")
	got := fwd.delivered()
	require.Len(t, got, len(ids))
	for id, n := range got {
		require.Equal(t, 1, n, "%s forwarded once", id)
	}
	fwd.mu.Lock()
	defer fwd.mu.Unlock()
	require.Equal(t, []int{50}, fwd.batches, "one ForwardMany for the message")
}
