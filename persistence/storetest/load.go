package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

func (s suite) testConcurrentClaimers(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	const (
		n        = 3000
		claimers = 8
		batch    = 25
	)
	storeConcurrently(ctx, t, store, n, 16, func(i int) persistence.Timeout {
		return timeout(fmt.Sprintf("c%05d", i), now.Add(-time.Duration(i)*time.Millisecond))
	})

	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		got   = make([][]string, claimers)
		errs  = make([]error, claimers)
	)
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				ids, err := store.ClaimDue(ctx, now, batch, time.Hour)
				if err != nil {
					errs[c] = err
					return
				}
				if len(ids) > batch {
					errs[c] = fmt.Errorf("ClaimDue returned %d ids, limit %d", len(ids), batch)
					return
				}
				if len(ids) == 0 {
					return
				}
				got[c] = append(got[c], ids...)
			}
		}()
	}
	close(start)
	wg.Wait()
	for c, err := range errs {
		require.NoError(t, err, "claimer %d", c)
	}

	all := slices.Concat(got...)
	seen := requireUnique(t, all)
	require.Len(t, seen, n, "together the claimers get every due timeout")
	for i := range n {
		require.Contains(t, seen, fmt.Sprintf("c%05d", i))
	}
}

func (s suite) testHundredThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: stores and claims 100,000 timeouts")
	}
	store, ctx := s.setup(t)
	now := base()
	const n = 100_000

	began := time.Now()
	// Due times rise with the id, so claim order is id order.
	storeConcurrently(ctx, t, store, n, 32, func(i int) persistence.Timeout {
		return persistence.Timeout{
			ID:          fmt.Sprintf("h%06d", i),
			Destination: "orders",
			Due:         now.Add(time.Duration(i-n) * time.Millisecond),
			Payload:     []byte(`{"n":1}`),
			Metadata:    map[string]string{"_watermill_message_uuid": fmt.Sprintf("h%06d", i)},
		}
	})
	stored := time.Since(began)

	began = time.Now()
	all := claimAll(ctx, t, store, now, 1000)
	claimed := time.Since(began)
	t.Logf("stored %d timeouts in %s (%.0f/s), claimed them in %s", n, stored.Round(time.Millisecond),
		float64(n)/stored.Seconds(), claimed.Round(time.Millisecond))

	requireUnique(t, all)
	require.Len(t, all, n, "every timeout claimed")
	require.True(t, slices.IsSorted(all), "claimed earliest due first, batch after batch")
	require.Equal(t, "h000000", all[0])
	require.Equal(t, fmt.Sprintf("h%06d", n-1), all[n-1])
}
