package timeouts_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
