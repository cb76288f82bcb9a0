package timeouts

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClaimWindow: a poll waits while the window is full, goes on when ids are handled, when the
// claims are given back, or when the oldest batch is older than the expiry.
func TestClaimWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newClaimWindow()
		ctx := t.Context()
		full := func() bool {
			short, cancel := context.WithTimeout(ctx, time.Millisecond)
			defer cancel()
			return !w.await(short, time.Now, 1000, time.Minute)
		}
		w.claimed(500, time.Now())
		require.False(t, full(), "500 of 1000")
		w.claimed(500, time.Now())
		require.True(t, full(), "1000 of 1000")
		w.handled(100)
		require.False(t, full(), "100 handled")
		w.claimed(100, time.Now())
		require.True(t, full())
		w.reset()
		require.False(t, full(), "claims given back")

		w.claimed(1000, time.Now())
		start := time.Now()
		require.True(t, w.await(ctx, time.Now, 1000, time.Minute))
		require.Equal(t, time.Minute, time.Since(start), "waited for the batch to expire, no longer")
	})
}
