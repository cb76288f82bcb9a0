package timeouts

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Activity is what a manager has done since it was created, for dashboards: the numbers behind
// its Prometheus metrics (Config.MetricsRegisterer), which it keeps whether or not they are
// registered.
type Activity struct {
	// Endpoint is Config.Endpoint.
	Endpoint string
	// Stored counts the delayed messages stored; Dispatched those forwarded to their
	// destination; Early those forwarded before their due time (it should stay 0).
	Stored, Dispatched, Early uint64
	// Parked counts the timeouts parked: their forward and their error-queue copy were both
	// refused (see Manager.Unpark). How many are parked now is in Manager.Stats.
	Parked uint64
	// Lateness counts the forwarded messages by how late they were (forwarding time minus due
	// time), in ascending buckets; the last one, with UpTo 0, counts those later than every
	// other bucket's UpTo.
	Lateness []LatenessBucket
	// Failures counts failures by stage: "fetch", "store", "dispatch", "recovery".
	Failures map[string]uint64
	// Breakers are the circuit breakers of the fetch, store and dispatch stages.
	Breakers []BreakerState
	// Clock is the latest measurement of the offset between the manager's clock and its
	// store's (Manager.ClockOffset).
	Clock ClockOffset
}

// LatenessBucket counts the messages forwarded later than the bucket before it and at most UpTo
// after their due time (UpTo 0: later than every bucket before it).
type LatenessBucket struct {
	UpTo  time.Duration
	Count uint64
}

// BreakerState is a circuit breaker's state: Armed while its stage is failing and it counts down
// to a critical error.
type BreakerState struct {
	Name  string
	Armed bool
}

// Activity returns what the manager has done since it was created. It reads counters in memory
// and never the store.
func (m *Manager) Activity() Activity {
	a := Activity{Endpoint: m.cfg.Endpoint, Failures: map[string]uint64{}, Clock: m.ClockOffset()}
	for i, b := range m.breakers {
		a.Breakers = append(a.Breakers, BreakerState{Name: m.breakerNames[i], Armed: b.Armed()})
	}
	if m.metrics == nil {
		return a
	}
	a.Stored = counterValue(m.metrics.stored)
	a.Dispatched = counterValue(m.metrics.dispatched)
	a.Early = counterValue(m.metrics.early)
	a.Parked = counterValue(m.metrics.parked)
	for _, stage := range []string{"fetch", "store", "dispatch", "recovery"} {
		a.Failures[stage] = counterValue(m.metrics.failures.WithLabelValues(stage))
	}
	var h dto.Metric
	if err := m.metrics.lateness.Write(&h); err == nil && h.Histogram != nil {
		var below uint64
		for _, b := range h.Histogram.GetBucket() {
			if math.IsInf(b.GetUpperBound(), 1) {
				continue
			}
			a.Lateness = append(a.Lateness, LatenessBucket{
				UpTo:  time.Duration(b.GetUpperBound() * float64(time.Second)),
				Count: b.GetCumulativeCount() - below,
			})
			below = b.GetCumulativeCount()
		}
		a.Lateness = append(a.Lateness, LatenessBucket{Count: h.Histogram.GetSampleCount() - below})
	}
	return a
}

func counterValue(c prometheus.Counter) uint64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil || d.Counter == nil {
		return 0
	}
	return uint64(d.Counter.GetValue())
}
