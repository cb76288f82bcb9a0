package satellites_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/errorqueue"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	public "github.com/timeoutmill/timeoutmill/satellites"
)

// txForwarder stands in for a transport that publishes and removes in one transaction.
type txForwarder struct {
	store persistence.Store
	fail  error
	mu    sync.Mutex
	sent  []*message.Message
}

func (f *txForwarder) Forward(ctx context.Context, t persistence.Timeout, msg *message.Message) (bool, error) {
	if f.fail != nil {
		return false, f.fail // the transaction rolled back: nothing published, nothing removed
	}
	removed, err := f.store.Remove(ctx, t.ID)
	if err != nil || !removed {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, msg)
	return true, nil
}

func newDispatch(t *testing.T, store persistence.Store, fwd public.Forwarder, retries int) (*satellites.Dispatch, *gochannel.GoChannel) {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "dispatch", TimeToWait: time.Hour, Message: critical.DispatchMessage, RetryDelay: time.Millisecond, OnTrip: func(*critical.Error) {},
	})
	require.NoError(t, err)
	t.Cleanup(breaker.Stop)
	d, err := satellites.NewDispatch(satellites.DispatchConfig{
		Endpoint: "e", Store: store, Publisher: pubSub, ErrorQueue: errorqueue.New(pubSub, ""),
		Breaker: breaker, NumberOfRetries: retries, Forwarder: fwd,
	}, nil)
	require.NoError(t, err)
	return d, pubSub
}

func TestForwarderDeliversAndRemovesInOneStep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memory.New()
		_, err := store.Store(ctx, persistence.Timeout{ID: "t1", Destination: "dest", Due: time.Now(), Payload: []byte("p"), Metadata: map[string]string{"h": "v"}})
		require.NoError(t, err)
		fwd := &txForwarder{store: store}
		d, _ := newDispatch(t, store, fwd, 0)

		require.NoError(t, d.Handle(dispatcherqueue.Encode("t1")))
		require.Len(t, fwd.sent, 1)
		require.Equal(t, "t1", fwd.sent[0].UUID)
		require.Equal(t, "v", fwd.sent[0].Metadata.Get("h"))

		// The dispatcher message is redelivered: the timeout is gone, nothing is forwarded twice.
		require.NoError(t, d.Handle(dispatcherqueue.Encode("t1")))
		require.Len(t, fwd.sent, 1)
	})
}

func TestForwarderFailureCountsAsAFailedForward(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memory.New()
		_, err := store.Store(ctx, persistence.Timeout{ID: "t2", Destination: "dest", Due: time.Now()})
		require.NoError(t, err)
		d, pubSub := newDispatch(t, store, &txForwarder{store: store, fail: errors.New("tx aborted")}, 1)
		errs, err := pubSub.Subscribe(ctx, "error")
		require.NoError(t, err)

		require.Error(t, d.Handle(dispatcherqueue.Encode("t2")), "first of two attempts: nacked for a retry")
		require.NoError(t, d.Handle(dispatcherqueue.Encode("t2")), "second: to the error queue")
		select {
		case m := <-errs:
			m.Ack()
			require.Contains(t, m.Metadata.Get("failure.reason"), "tx aborted")
			require.Equal(t, "2", m.Metadata.Get("failure.attempts"))
		case <-time.After(5 * time.Second):
			t.Fatal("nothing on the error queue")
		}
		_, err = store.Peek(ctx, "t2")
		require.ErrorIs(t, err, persistence.ErrNotFound)
	})
}

// txBatchForwarder stands in for a transport that forwards a batch and removes its timeouts in one
// transaction: a failing batch publishes and removes nothing. batchFail fails batches of many, as
// one bad message among them fails a real transaction.
type txBatchForwarder struct {
	txForwarder
	batchFail error
	slow      time.Duration // how long a batch takes, so that messages handled meanwhile queue up
	batches   []int         // sizes of the batches forwarded; guarded by txForwarder.mu
}

func (f *txBatchForwarder) ForwardMany(ctx context.Context, fs []public.Forwarding) ([]string, error) {
	time.Sleep(f.slow) // fake time in the tests' bubbles: a batch takes a while, as a commit does
	if f.batchFail != nil && len(fs) > 1 {
		return nil, f.batchFail
	}
	ids := make([]string, len(fs))
	for i, fw := range fs {
		ids[i] = fw.Timeout.ID
	}
	removed, err := f.store.(*batchStore).memStore.RemoveMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	gone := map[string]bool{}
	for _, id := range removed {
		gone[id] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, len(fs))
	for _, fw := range fs {
		if gone[fw.Timeout.ID] {
			f.sent = append(f.sent, fw.Message)
		}
	}
	return removed, nil
}

func (f *txBatchForwarder) delivered() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := map[string]int{}
	for _, m := range f.sent {
		n[m.UUID]++
	}
	return n
}

func setupBatchForwarder(t *testing.T, fwd *txBatchForwarder) *batchBundle {
	t.Helper()
	b := setupBatch(t, func(c *satellites.DispatchConfig) { c.Forwarder = fwd })
	fwd.store = b.store
	return b
}

// TestBatchForwarderForwardsTogetherEachOnce: dispatcher messages handled at the same time are
// forwarded in batches, each timeout exactly once, redeliveries among them included, and nothing
// goes through the publisher.
func TestBatchForwarderForwardsTogetherEachOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fwd := &txBatchForwarder{slow: 5 * time.Millisecond}
		b := setupBatchForwarder(t, fwd)
		ids := b.storeDue(t, 100, "payments", "shipping")
		twice := append(append([]string(nil), ids...), ids[:50]...)

		for _, err := range b.handleAll(twice) {
			require.NoError(t, err)
		}
		got := fwd.delivered()
		require.Len(t, got, len(ids))
		for id, n := range got {
			require.Equal(t, 1, n, "%s forwarded once", id)
		}
		for _, m := range fwd.sent {
			require.Equal(t, m.UUID, m.Metadata.Get("trace-id"), "headers kept")
		}
		st, err := b.store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending)
		require.Zero(t, b.published.publishCalls(), "the forwarder delivers, not the publisher")
		require.Less(t, len(fwd.batches), len(ids), "messages handled together are forwarded together")
	})
}

// TestBatchForwarderFailureFallsBackToOneByOne: a batch that fails (rolled back) is forwarded one
// by one, in batches of one. So a failing timeout counts its own attempt; the others go through,
// each once.
func TestBatchForwarderFailureFallsBackToOneByOne(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fwd := &txBatchForwarder{batchFail: errors.New("batch rolled back"), slow: 5 * time.Millisecond}
		b := setupBatchForwarder(t, fwd)
		ids := b.storeDue(t, 30, "payments")

		for _, err := range b.handleAll(ids) {
			require.NoError(t, err)
		}
		got := fwd.delivered()
		require.Len(t, got, len(ids))
		for id, n := range got {
			require.Equal(t, 1, n, "%s forwarded once", id)
		}
		for _, n := range fwd.batches {
			require.Equal(t, 1, n, "no batch of many went through")
		}
	})
}

// TestBatchForwarderSkipsWhatIsGone: a timeout removed between the look-up and the forward (by
// another instance) is not forwarded again, and its dispatcher message is acked.
func TestBatchForwarderSkipsWhatIsGone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fwd := &txBatchForwarder{slow: 20 * time.Millisecond}
		b := setupBatchForwarder(t, fwd)
		ids := b.storeDue(t, 40, "payments")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(10 * time.Millisecond) // fake time: while the first batch is being forwarded
			_, _ = b.store.memStore.RemoveMany(context.Background(), ids[20:])
		}()
		for _, err := range b.handleAll(ids) {
			require.NoError(t, err)
		}
		wg.Wait()
		for id, n := range fwd.delivered() {
			require.Equal(t, 1, n, "%s forwarded once", id)
		}
		st, err := b.store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending)
	})
}

var _ public.BatchForwarder = (*txBatchForwarder)(nil)

// TestManyIDMessageThroughABatchForwarder: the ids of one message are forwarded in one ForwardMany,
// each exactly once, redelivery included.
func TestManyIDMessageThroughABatchForwarder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
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
	})
}
