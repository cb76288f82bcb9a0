package satellites_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	public "github.com/timeoutmill/timeoutmill/satellites"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/satellites"
)

// txBatchForwarder stands in for a transport that forwards a batch and removes its timeouts in
// one transaction: a failing batch publishes and removes nothing. batchFail fails batches of
// many, as one bad message among them fails a real transaction.
type txBatchForwarder struct {
	txForwarder
	batchFail error
	slow      time.Duration // how long a batch takes, so that messages handled meanwhile queue up
	batches   []int         // sizes of the batches forwarded; guarded by txForwarder.mu
}

func (f *txBatchForwarder) ForwardMany(ctx context.Context, fs []public.Forwarding) ([]string, error) {
	time.Sleep(f.slow)
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
}

// TestBatchForwarderFailureFallsBackToOneByOne: a batch that fails (rolled back) is forwarded
// one by one, in batches of one, so a failing timeout counts its own attempt and the others go
// through, each once.
func TestBatchForwarderFailureFallsBackToOneByOne(t *testing.T) {
	t.Parallel()
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
}

// TestBatchForwarderSkipsWhatIsGone: a timeout removed between the look-up and the forward (by
// another instance) is not forwarded again, and its dispatcher message is acked.
func TestBatchForwarderSkipsWhatIsGone(t *testing.T) {
	t.Parallel()
	fwd := &txBatchForwarder{slow: 20 * time.Millisecond}
	b := setupBatchForwarder(t, fwd)
	ids := b.storeDue(t, 40, "payments")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(10 * time.Millisecond) // while the first batch is being forwarded
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
}

var _ public.BatchForwarder = (*txBatchForwarder)(nil)
