package timeouts_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

func TestMetricsCountStoredDispatchedAndLateness(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		b := setup(t, memory.New(), func(c *timeouts.Config) { c.MetricsRegisterer = reg })
		delivered := subscribe(t, b.pubSub, "metered")

		for range 3 {
			msg := message.NewMessage(watermill.NewUUID(), nil)
			timeouts.DeliverAfter(msg, 100*time.Millisecond)
			require.NoError(t, b.manager.Publisher().Publish("metered", msg))
		}
		for range 3 {
			await(t, delivered, 5*time.Second)
		}
		dispatched := `
# HELP timeoutmill_timeouts_dispatched_total Due messages forwarded to their destination.
# TYPE timeoutmill_timeouts_dispatched_total counter
timeoutmill_timeouts_dispatched_total{endpoint="orders"} 3
`
		synctest.Wait() // the forwards are confirmed and counted
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(dispatched), "timeoutmill_timeouts_dispatched_total"))

		expected := `
# HELP timeoutmill_timeouts_stored_total Delayed messages stored.
# TYPE timeoutmill_timeouts_stored_total counter
timeoutmill_timeouts_stored_total{endpoint="orders"} 3
# HELP timeoutmill_timeouts_early_total Due messages forwarded before their due time (should stay 0).
# TYPE timeoutmill_timeouts_early_total counter
timeoutmill_timeouts_early_total{endpoint="orders"} 0
`
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected),
			"timeoutmill_timeouts_stored_total", "timeoutmill_timeouts_early_total"))
		n, err := testutil.GatherAndCount(reg, "timeoutmill_dispatch_lateness_seconds", "timeoutmill_timeouts_pending", "timeoutmill_circuit_breaker_armed")
		require.NoError(t, err)
		require.Equal(t, 1+1+3, n, "lateness histogram, pending gauge, one armed gauge per breaker")
	})
}

func TestActivityCountsWithoutARegisterer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		delivered := subscribe(t, b.pubSub, "observed")

		before := b.manager.Activity()
		require.Equal(t, "orders", before.Endpoint)
		require.Zero(t, before.Dispatched)
		names := []string{}
		for _, br := range before.Breakers {
			names = append(names, br.Name)
			require.False(t, br.Armed, br.Name)
		}
		require.Equal(t, []string{"fetch", "store", "dispatch"}, names)

		for range 2 {
			msg := message.NewMessage(watermill.NewUUID(), nil)
			timeouts.DeliverAfter(msg, 50*time.Millisecond)
			require.NoError(t, b.manager.Publisher().Publish("observed", msg))
		}
		for range 2 {
			await(t, delivered, 5*time.Second)
		}
		synctest.Wait() // the forwards are confirmed and counted
		a := b.manager.Activity()
		require.Equal(t, uint64(2), a.Dispatched)
		require.Equal(t, uint64(2), a.Stored)
		require.Zero(t, a.Early)
		var inBuckets uint64
		for i, bucket := range a.Lateness {
			inBuckets += bucket.Count
			if i < len(a.Lateness)-1 {
				require.Positive(t, bucket.UpTo)
			} else {
				require.Zero(t, bucket.UpTo, "the last bucket is open-ended")
			}
		}
		require.Equal(t, uint64(2), inBuckets, "every dispatched message is in one lateness bucket")
		require.Contains(t, a.Failures, "dispatch")
	})
}

// counted is a memory store whose Count says what the test set, so that the gauges show whether
// they asked Count rather than Stats.
type counted struct {
	inspectable
	pending, parked int
}

type inspectable interface {
	persistence.Store
	persistence.Inspector
}

func (c counted) Count(context.Context) (int, int, error) { return c.pending, c.parked, nil }

func TestStoreGaugesAskCount(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		setup(t, counted{inspectable: memory.New().(inspectable), pending: 7, parked: 2}, func(c *timeouts.Config) { c.MetricsRegisterer = reg })
		expected := `
# HELP timeoutmill_timeouts_parked Parked timeouts in the store, waiting for an operator (-1 when the store cannot be read).
# TYPE timeoutmill_timeouts_parked gauge
timeoutmill_timeouts_parked{endpoint="orders"} 2
# HELP timeoutmill_timeouts_pending Timeouts in the store, parked ones included (-1 when the store cannot be read).
# TYPE timeoutmill_timeouts_pending gauge
timeoutmill_timeouts_pending{endpoint="orders"} 7
`
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected),
			"timeoutmill_timeouts_pending", "timeoutmill_timeouts_parked"), "the counts of Count, not of the empty store's Stats")
	})
}

// slowStats is a memory store without Count whose Stats takes took, says pending, and fails
// while fail is set; calls counts the Stats the gauges asked.
type slowStats struct {
	inspectable
	took    time.Duration
	pending atomic.Int64
	fail    atomic.Bool
	calls   atomic.Int64
}

func (s *slowStats) Stats(context.Context, time.Time) (persistence.Stats, error) {
	s.calls.Add(1)
	time.Sleep(s.took) // virtual time: the bubble's clock advances by took
	if s.fail.Load() {
		return persistence.Stats{}, errors.New("the store cannot be read")
	}
	return persistence.Stats{Pending: int(s.pending.Load())}, nil
}

// TestStoreGaugesReuseASlowRead: a read that took 2 s is reused for 20 s, so scrapes meanwhile
// cost the store nothing; after that the next scrape reads again; a failed read is not reused.
func TestStoreGaugesReuseASlowRead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		store := &slowStats{inspectable: memory.New().(inspectable), took: 2 * time.Second}
		store.pending.Store(5)
		setup(t, store, func(c *timeouts.Config) { c.MetricsRegisterer = reg })
		pending := func() float64 {
			t.Helper()
			families, err := reg.Gather()
			require.NoError(t, err)
			for _, f := range families {
				if f.GetName() == "timeoutmill_timeouts_pending" {
					return f.GetMetric()[0].GetGauge().GetValue()
				}
			}
			t.Fatal("no timeoutmill_timeouts_pending gauge")
			return 0
		}

		require.Equal(t, 5.0, pending())
		require.EqualValues(t, 1, store.calls.Load())
		store.pending.Store(6)
		time.Sleep(15 * time.Second) // advances virtual time: within ten times the 2 s read
		require.Equal(t, 5.0, pending(), "the read is reused")
		require.EqualValues(t, 1, store.calls.Load(), "no Stats while the read is fresh")
		time.Sleep(6 * time.Second) // 21 s after the read ended
		require.Equal(t, 6.0, pending(), "read again")
		require.EqualValues(t, 2, store.calls.Load())

		store.fail.Store(true)
		time.Sleep(21 * time.Second)
		require.Equal(t, -1.0, pending(), "a store that cannot be read")
		require.Equal(t, -1.0, pending(), "still")
		require.EqualValues(t, 4, store.calls.Load(), "a failed read is not reused")
		store.fail.Store(false)
		require.Equal(t, 6.0, pending(), "read again at the next scrape after a failure")
	})
}

// TestMetricsShowClaimAndDispatchBatchSizes: a backlog due at once is claimed in batches of
// ClaimBatchSize, and the claims' and dispatch batches' histograms add up to it; a claim that
// finds nothing due counts in the histogram's 0 bucket.
func TestMetricsShowClaimAndDispatchBatchSizes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		b := setup(t, memory.New(), func(c *timeouts.Config) {
			c.MetricsRegisterer = reg
			c.ClaimBatchSize = 10
		})
		delivered := subscribe(t, b.pubSub, "batched")
		const backlog = 25
		for range backlog {
			msg := message.NewMessage(watermill.NewUUID(), nil)
			timeouts.DeliverAfter(msg, time.Second)
			require.NoError(t, b.manager.Publisher().Publish("batched", msg))
		}
		for range backlog {
			await(t, delivered, 5*time.Second)
		}
		synctest.Wait() // the last batch is counted
		claims := histogram(t, reg, "timeoutmill_claim_batch_size")
		require.Equal(t, float64(backlog), claims.GetSampleSum(), "every id claimed once")
		require.GreaterOrEqual(t, claims.GetSampleCount(), uint64(3), "at most 10 ids a claim")
		require.Equal(t, uint64(2), bucket(claims, 10)-bucket(claims, 5), "two full claims of 10")
		dispatches := histogram(t, reg, "timeoutmill_dispatch_batch_size")
		require.Equal(t, float64(backlog), dispatches.GetSampleSum(), "every timeout forwarded once")
		require.Positive(t, dispatches.GetSampleCount())

		// Nothing more is due: the next look claims nothing, in the 0 bucket.
		empty := bucket(claims, 0)
		time.Sleep(2 * time.Minute) // fake time: past the poll interval
		synctest.Wait()
		require.Greater(t, bucket(histogram(t, reg, "timeoutmill_claim_batch_size"), 0), empty)
	})
}

// histogram gathers the histogram name from reg.
func histogram(t *testing.T, reg prometheus.Gatherer, name string) *dto.Histogram {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			return f.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no histogram %s", name)
	return nil
}

// bucket is the cumulative count of h's bucket with upper bound le.
func bucket(h *dto.Histogram, le float64) uint64 {
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	return 0
}
