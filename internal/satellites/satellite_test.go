package satellites_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
)

// slowRemoval is a batchStore whose removals wait until the gate opens.
type slowRemoval struct {
	*batchStore
	gate chan struct{}
}

func (s slowRemoval) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	<-s.gate
	return s.batchStore.RemoveMany(ctx, ids)
}

// MaxUnremoved bounds the ids forwarded and not yet removed at one moment.
// With every removal held, a backlog in full batches fills that many and no more.
func TestMaxUnremovedBoundsTheForwardedIDsNotYetRemoved(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const maxBatch = 3
		gate := make(chan struct{})
		b := setupBatch(t, func(c *satellites.DispatchConfig) {
			c.MaxBatch = maxBatch
			c.Store = slowRemoval{batchStore: c.Store.(*batchStore), gate: gate}
		})
		ids := b.storeDue(t, 60*maxBatch, "payments")
		// Messages of maxBatch ids each, handled at once: full batches.
		var msgs [][]string
		for chunk := range slices.Chunk(ids, maxBatch) {
			msgs = append(msgs, chunk)
		}
		done := make(chan error, len(msgs))
		for _, m := range msgs {
			go func() { done <- b.dispatch.Handle(dispatcherqueue.Encode(m...)) }()
		}
		time.Sleep(time.Second) // advances fake time past the publisher's confirms
		synctest.Wait()         // every batch side by side waits on its removal
		require.Len(t, b.published.to("payments"), satellites.MaxUnremoved(maxBatch))
		close(gate)
		for range msgs {
			require.NoError(t, <-done)
		}
		require.Len(t, b.published.to("payments"), len(ids))
	})
}

func TestMaxUnremovedOfZeroIsThatOfTheDefaultMaxBatch(t *testing.T) {
	t.Parallel()
	require.Equal(t, satellites.MaxUnremoved(satellites.DefaultMaxBatch), satellites.MaxUnremoved(0))
}
