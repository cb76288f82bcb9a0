package timeouts_test

import (
	"context"
	"sync"
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

// clockedStore is a memory store with a clock of its own, as a database server has: the system
// clock (virtual in a synctest bubble), the one true clock of these tests. Each reading takes a round trip of a millisecond.
type clockedStore struct {
	inner
}

func (s *clockedStore) Now(context.Context) (time.Time, error) {
	time.Sleep(500 * time.Microsecond) // in a synctest bubble: advances virtual time by the trip there
	now := time.Now()
	time.Sleep(500 * time.Microsecond) // and back
	return now, nil
}

var _ persistence.Clocked = (*clockedStore)(nil)

// skewedClock is an instance's clock: the system clock plus an offset, which may change.
type skewedClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *skewedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *skewedClock) set(off time.Duration) {
	c.mu.Lock()
	c.off = off
	c.mu.Unlock()
}

// requireOnTheStoresClock waits for every timeout of dues and checks that none came before its
// due time on the store's clock, nor later than the pipeline's own lateness, far below the
// instance's skew: a clock behind the store's adds no lateness.
func requireOnTheStoresClock(t *testing.T, delivered <-chan arrival, dues map[string]time.Time) {
	t.Helper()
	for range dues {
		a := await(t, delivered, 30*time.Second)
		due, ok := dues[a.msg.UUID]
		require.True(t, ok)
		require.False(t, a.at.Before(due), "delivered %s before due on the store's clock", due.Sub(a.at))
		require.Less(t, a.at.Sub(due), time.Second, "late by more than the pipeline is, nearer the skew")
	}
}

// An instance whose clock runs 3 s ahead of its store's, or 3 s behind it, or first one then the
// other, delivers nothing early by the store's clock and adds none of its skew to lateness: the
// store's clock decides. It reports the offset, raises the alarm, and exports the metric.
func TestTheStoresClockDecidesDue(t *testing.T) {
	t.Parallel()
	for name, skews := range map[string][]time.Duration{
		"ahead":             {3 * time.Second},
		"behind":            {-3 * time.Second},
		"ahead then behind": {3 * time.Second, -3 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				clock := &skewedClock{off: skews[0]}
				reg := prometheus.NewRegistry()
				b := setup(t, &clockedStore{inner: memory.New()}, func(c *timeouts.Config) {
					c.Clock = clock
					c.MetricsRegisterer = reg
				})
				delivered := subscribe(t, b.pubSub, "dest")
				for _, skew := range skews {
					clock.set(skew)
					requireOnTheStoresClock(t, delivered, dueStream(t, b, 20))

					off := b.manager.ClockOffset()
					require.True(t, off.Measured)
					require.InDelta(t, float64(-skew), float64(off.Offset), float64(100*time.Millisecond))
					require.Positive(t, off.Error)
					require.True(t, off.Alarm)
					require.InDelta(t, -skew.Seconds(), testutil.ToFloat64(gaugeOf(t, reg, "timeoutmill_clock_offset_seconds")), 0.1)
					require.Equal(t, off.Measured, b.manager.Activity().Clock.Measured)
				}
				require.Zero(t, b.manager.Activity().Early)
			})
		})
	}
}

// A store without a clock of its own (memory, SQLite: one process, one machine) is never
// measured: the manager's clock is the store's, no offset is reported and no alarm raised.
func TestStoreWithoutAClockNeedsNoMeasurement(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clock := &skewedClock{off: 3 * time.Second}
		reg := prometheus.NewRegistry()
		store := memory.New()
		b := setup(t, store, func(c *timeouts.Config) {
			c.Clock = clock
			c.MetricsRegisterer = reg
		})
		delivered := subscribe(t, b.pubSub, "dest")
		// Due times on the manager's clock, which is the store's here: none comes before them by it.
		dues := map[string]time.Time{}
		for i := range 5 {
			msg := message.NewMessage(watermill.NewUUID(), nil)
			due := clock.Now().Add(300*time.Millisecond + time.Duration(i)*50*time.Millisecond)
			timeouts.DeliverAt(msg, due)
			dues[msg.UUID] = due
			require.NoError(t, b.manager.Publisher().Publish("dest", msg))
		}
		for range dues {
			a := await(t, delivered, 30*time.Second)
			at := a.at.Add(3 * time.Second) // on the manager's clock
			require.False(t, at.Before(dues[a.msg.UUID]), "delivered before due on the manager's clock")
		}
		off := b.manager.ClockOffset()
		require.False(t, off.Measured)
		require.Zero(t, off.Offset)
		require.False(t, off.Alarm)
		require.Zero(t, testutil.ToFloat64(gaugeOf(t, reg, "timeoutmill_clock_offset_seconds")))
	})
}

// gaugeOf gathers the gauge name from reg.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Gauge {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(f.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no gauge %s", name)
	return nil
}
