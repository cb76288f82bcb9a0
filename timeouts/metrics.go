package timeouts

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/storeclock"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// metrics are the manager's Prometheus metrics, all named timeoutmill_* and labelled with the
// endpoint. They are kept whether or not they are registered: Manager.Activity reads them. A nil
// *metrics records nothing.
type metrics struct {
	stored     prometheus.Counter
	dispatched prometheus.Counter
	early      prometheus.Counter
	lateness   prometheus.Histogram
	failures   *prometheus.CounterVec
	parked     prometheus.Counter
	// republishedAlone counts due messages published again one by one after their batch's
	// publish was refused.
	republishedAlone prometheus.Counter
	// claimed is the size of each claim, empty ones included; dispatchBatch the size of each
	// batch of due timeouts forwarded together.
	claimed, dispatchBatch prometheus.Histogram
	// clockOffset and clockError are the latest measurement of the store's clock (Manager.ClockOffset).
	clockOffset, clockError prometheus.Gauge
}

// latenessBuckets span a millisecond to ten minutes: the pipeline's own precision up to a
// poller held back by an outage.
var latenessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// batchBuckets span an empty claim to the largest claim and dispatcher message (1,000 ids).
var batchBuckets = []float64{0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000}

func newMetrics(reg prometheus.Registerer, endpoint string, store persistence.Store, now func() time.Time, breakers []*breaker.CircuitBreaker, breakerNames []string) (*metrics, error) {
	labels := prometheus.Labels{"endpoint": endpoint}
	m := &metrics{
		stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "timeoutmill_timeouts_stored_total", Help: "Delayed messages stored.", ConstLabels: labels,
		}),
		dispatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "timeoutmill_timeouts_dispatched_total", Help: "Due messages forwarded to their destination.", ConstLabels: labels,
		}),
		early: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "timeoutmill_timeouts_early_total", Help: "Due messages forwarded before their due time (should stay 0).", ConstLabels: labels,
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "timeoutmill_dispatch_lateness_seconds", Help: "Time from a message's due time to its forwarding.",
			ConstLabels: labels, Buckets: latenessBuckets,
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "timeoutmill_failures_total", Help: "Failures by stage (fetch, store, dispatch).", ConstLabels: labels,
		}, []string{"stage"}),
		parked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "timeoutmill_timeouts_parked_total", Help: "Timeouts parked: their forward and their error-queue copy were both refused.", ConstLabels: labels,
		}),
		republishedAlone: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "timeoutmill_dispatch_republished_alone_total", Help: "Due messages published again one by one after the publish of their batch was refused.",
			ConstLabels: labels,
		}),
		claimed: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "timeoutmill_claim_batch_size", Help: "Due ids taken by each claim of the poller, empty claims included.",
			ConstLabels: labels, Buckets: batchBuckets,
		}),
		dispatchBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "timeoutmill_dispatch_batch_size", Help: "Due timeouts forwarded together: one lookup, one publish per destination and one removal for each batch.",
			ConstLabels: labels, Buckets: batchBuckets,
		}),
		clockOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "timeoutmill_clock_offset_seconds", Help: "The store's clock minus this instance's, as last measured (0 with a store that has no clock of its own).",
			ConstLabels: labels,
		}),
		clockError: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "timeoutmill_clock_offset_error_seconds", Help: "How far the measured clock offset may be from the true one: half the measurement's round trip.",
			ConstLabels: labels,
		}),
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{m.stored, m.dispatched, m.early, m.lateness, m.failures, m.parked, m.republishedAlone,
		m.claimed, m.dispatchBatch, m.clockOffset, m.clockError}
	for i, b := range breakers {
		collectors = append(collectors, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "timeoutmill_circuit_breaker_armed", Help: "1 while a stage is failing and its breaker counts down to a critical error.",
			ConstLabels: prometheus.Labels{"endpoint": endpoint, "breaker": breakerNames[i]},
		}, func() float64 { return boolGauge(b.Armed()) }))
	}
	if inspector, ok := store.(persistence.Inspector); ok {
		collectors = append(collectors, newStoreGauges(inspector, now, labels))
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) onStored() {
	if m != nil {
		m.stored.Inc()
	}
}

func (m *metrics) onDispatched(t persistence.Timeout, at time.Time) {
	if m == nil {
		return
	}
	m.dispatched.Inc()
	late := at.Sub(t.Due)
	if late < 0 {
		m.early.Inc()
		late = 0
	}
	m.lateness.Observe(late.Seconds())
}

func (m *metrics) onRepublishedAlone(n int) {
	if m != nil {
		m.republishedAlone.Add(float64(n))
	}
}

func (m *metrics) onClaimed(n int) {
	if m != nil {
		m.claimed.Observe(float64(n))
	}
}

func (m *metrics) onDispatchBatch(n int) {
	if m != nil {
		m.dispatchBatch.Observe(float64(n))
	}
}

func (m *metrics) onParked() {
	if m != nil {
		m.parked.Inc()
	}
}

func (m *metrics) onClock(c storeclock.Measurement) {
	if m != nil {
		m.clockOffset.Set(c.Offset.Seconds())
		m.clockError.Set(c.Error.Seconds())
	}
}

func (m *metrics) onFailure(stage string) {
	if m != nil {
		m.failures.WithLabelValues(stage).Inc()
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// storeGauges exports what the store holds, from one persistence.Counter.Count, or one
// Inspector.Stats when the store has no Count: the pending timeouts and, among them, the parked
// ones. A read is reused for gaugeReuse times as long as it took. So the gauges take at most
// about a tenth of one connection's time, however often they are scraped: a store that counts in
// milliseconds is read at nearly every scrape, and one whose Stats scans a large table every so
// often. A failed read is not reused.
type storeGauges struct {
	inspector       persistence.Inspector
	now             func() time.Time // the store's time
	pending, parked *prometheus.Desc

	// mu is held during a read. A scrape that comes meanwhile waits for it and reuses it.
	mu sync.Mutex
	// last is the latest successful read; zero before the first.
	last gaugeRead
}

// gaugeRead is one read of the store's counts: when it ended and how long it took.
type gaugeRead struct {
	pending, parked float64
	at              time.Time
	took            time.Duration
}

// gaugeReuse is how many times as long as a read took the gauges reuse it.
const gaugeReuse = 10

// gaugeReadTimeout bounds one read of the store's counts.
const gaugeReadTimeout = 5 * time.Second

func newStoreGauges(inspector persistence.Inspector, now func() time.Time, labels prometheus.Labels) *storeGauges {
	return &storeGauges{
		inspector: inspector,
		now:       now,
		pending:   prometheus.NewDesc("timeoutmill_timeouts_pending", "Timeouts in the store, parked ones included (-1 when the store cannot be read).", nil, labels),
		parked:    prometheus.NewDesc("timeoutmill_timeouts_parked", "Parked timeouts in the store, waiting for an operator (-1 when the store cannot be read).", nil, labels),
	}
}

func (g *storeGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.pending
	ch <- g.parked
}

func (g *storeGauges) Collect(ch chan<- prometheus.Metric) {
	r := g.read()
	ch <- prometheus.MustNewConstMetric(g.pending, prometheus.GaugeValue, r.pending)
	ch <- prometheus.MustNewConstMetric(g.parked, prometheus.GaugeValue, r.parked)
}

// read returns the latest read while it is fresh (see storeGauges), else reads the store.
func (g *storeGauges) read() gaugeRead {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.at.IsZero() && time.Since(g.last.at) < gaugeReuse*g.last.took {
		return g.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), gaugeReadTimeout)
	defer cancel()
	start := time.Now()
	r, err := g.count(ctx)
	if err != nil {
		return gaugeRead{pending: -1, parked: -1}
	}
	r.at = time.Now()
	r.took = r.at.Sub(start)
	g.last = r
	return r
}

// count reads the two counts alone when the store has Count, without Stats' index ranges.
func (g *storeGauges) count(ctx context.Context) (gaugeRead, error) {
	if c, ok := g.inspector.(persistence.Counter); ok {
		p, k, err := c.Count(ctx)
		return gaugeRead{pending: float64(p), parked: float64(k)}, err
	}
	st, err := g.inspector.Stats(ctx, g.now())
	return gaugeRead{pending: float64(st.Pending), parked: float64(st.Parked)}, err
}
