package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCollectorCountsEarlyDuplicatedAndLost(t *testing.T) {
	t.Parallel()
	c := newCollector("run", 4)
	due := time.Now()
	c.record(0, due, due.Add(3*time.Millisecond))
	c.record(1, due, due.Add(-time.Millisecond)) // early
	c.record(1, due, due.Add(time.Millisecond))  // duplicate
	c.record(3, due, due.Add(10*time.Millisecond))
	c.expect(4)

	tl := c.tally()
	require.Equal(t, 3, tl.unique)
	require.Equal(t, 1, tl.dups)
	require.Equal(t, 1, tl.early)
	require.Equal(t, -time.Millisecond, tl.lateness.Min)
	require.Equal(t, 10*time.Millisecond, tl.lateness.Max)
	require.Equal(t, 3*time.Millisecond, tl.lateness.P50)
	select {
	case <-c.all:
		t.Fatal("one message is missing")
	default:
	}
	c.record(2, due, due)
	<-c.all
}

func TestPercentileIsNearestRank(t *testing.T) {
	t.Parallel()
	samples := make([]time.Duration, 100)
	for i := range samples {
		samples[i] = time.Duration(100-i) * time.Millisecond
	}
	l := newLateness(samples)
	require.Equal(t, 50*time.Millisecond, l.P50)
	require.Equal(t, 99*time.Millisecond, l.P99)
	require.Equal(t, 100*time.Millisecond, l.Max)
	require.Nil(t, newLateness(nil))
}

func TestTablesShowEveryRowAndWhyOneWasNotRun(t *testing.T) {
	t.Parallel()
	results := []Result{
		{System: "GoChannel + memory", Kind: KindBacklog, Messages: 20000, PublishRate: 12345.6, DrainRate: 101000,
			Lateness: &Lateness{P50: 1500 * time.Microsecond, P99: 180 * time.Millisecond, Max: 200 * time.Millisecond},
			Counted:  true, Early: 0, Notes: []string{"defaults"}},
		{System: "peer", Kind: KindPrecision, Messages: 400, Counted: true, Early: 272},
		{System: "RabbitMQ native (28 levels)", Kind: KindBacklog, NotRun: "no RabbitMQ"},
	}
	var text, md strings.Builder
	require.NoError(t, WriteText(&text, results))
	require.NoError(t, WriteMarkdown(&md, results))
	require.Contains(t, text.String(), "GoChannel + memory — backlog")
	require.Contains(t, text.String(), "12,346")
	require.Contains(t, text.String(), "101,000")
	require.Contains(t, text.String(), "272 (68 %)")
	require.Contains(t, md.String(), "| GoChannel + memory — backlog | 20,000 | 12,346 | 101,000 | 1.5 | 180 | 200 | 0 | 0 | 0 | defaults |")
	require.Contains(t, md.String(), "| RabbitMQ native (28 levels) — backlog | — | — | — | — | — | — | — | — | — | not run: no RabbitMQ |")
}

func TestTargetsReadTheRows(t *testing.T) {
	t.Parallel()
	results := []Result{
		{System: ceilingRoundTrip, Kind: KindCeiling, Figures: map[string]float64{"drain": 9000}},
		{System: ceilingDeadLetter, Kind: KindCeiling, Figures: map[string]float64{"drain": 5000}},
		{System: ceilingGoChannel, Kind: KindCeiling, Figures: map[string]float64{"drain": 100000}},
		{System: "RabbitMQ + PostgreSQL", Kind: KindBacklog, Counted: true, Messages: 20000, Figures: map[string]float64{"drain": 4600},
			Lateness: &Lateness{P99: 1200 * time.Millisecond}},
		{System: rabbitMQPostgres1KB, Kind: KindBacklog, Counted: true, Figures: map[string]float64{"drain": 4000}},
		{System: "RabbitMQ + PostgreSQL", Kind: KindPrecision, Counted: true, Lateness: &Lateness{P99: 4 * time.Millisecond}},
		{System: "GoChannel + SQLite", Kind: KindPrecision, Counted: true, Early: 1, Lateness: &Lateness{P99: 6 * time.Millisecond}},
		{System: "GoChannel + memory", Kind: KindBacklog, Counted: true, Figures: map[string]float64{"drain": 79000}},
		{System: nativeRabbitMQ().Name, Kind: KindBacklog, Counted: true, Figures: map[string]float64{"drain": 950}},
		{System: nativePlainName, Kind: KindBacklog, Counted: true, Early: 3, Reference: true, Figures: map[string]float64{"drain": 1000}},
	}
	got := map[string]Target{}
	for _, tg := range Targets(results) {
		got[tg.Goal] = tg
	}
	require.Equal(t, "no", got["early = 0 in every timeoutmill scenario"].Met)
	require.NotContains(t, got["early = 0 in every timeoutmill scenario"].Measured, nativePlainName, "a yardstick is not timeoutmill")
	require.Equal(t, "yes", got["precision p99 ≤ 5 ms, RabbitMQ + PostgreSQL"].Met)
	require.Equal(t, "no", got["precision p99 ≤ 5 ms, GoChannel + SQLite"].Met)
	require.Equal(t, "—", got["precision p99 ≤ 5 ms, GoChannel + memory"].Met, "not run")
	require.Equal(t, "yes", got["drain RabbitMQ + PostgreSQL ≥ 0.5× the raw round trip"].Met)
	require.Contains(t, got["drain RabbitMQ + PostgreSQL ≥ 0.5× the raw round trip"].Measured, "1 KB payloads: 4,000/s = 0.44×")
	require.Equal(t, "no", got["drain RabbitMQ + PostgreSQL above the one-hop dead-letter path (a TTL queue)"].Met)
	require.Equal(t, "no", got["RabbitMQ + PostgreSQL backlog delivered with p99 lateness ≤ 1 s"].Met)
	// 20,000 through a 9,000/s round trip take 2,222 ms: 1,200 ms is 0.54× of it.
	ratio := got["RabbitMQ + PostgreSQL backlog delivered with p99 lateness ≤ 2× the raw round trip's time for the same count"]
	require.Equal(t, "yes", ratio.Met)
	require.Contains(t, ratio.Measured, "0.54×")
	require.Equal(t, "no", got["drain GoChannel + memory ≥ 0.8× the GoChannel relay"].Met)
	require.Equal(t, "—", got["drain GoChannel + SQLite ≥ 0.4× the GoChannel relay"].Met, "not run")
	require.Equal(t, "yes", got["drain RabbitMQ native ≥ 0.9× the plain client on the same topology"].Met)
}

// TestMedianRowCountsEveryRun: a scenario run three times is reported by its median run, and
// an early, lost or duplicated message of any run shows in the row.
func TestMedianRowCountsEveryRun(t *testing.T) {
	t.Parallel()
	runs := []Result{
		{System: "s", Kind: KindBacklog, DrainRate: 9000, Counted: true, Lost: 1, Notes: []string{"fast"}},
		{System: "s", Kind: KindBacklog, NotRun: "pilot: broker gone"},
		{System: "s", Kind: KindBacklog, DrainRate: 3000, Counted: true, Early: 2},
		{System: "s", Kind: KindBacklog, DrainRate: 5000, Counted: true, Duplicated: 3, Notes: []string{"middle"},
			Lateness: &Lateness{P99: 7 * time.Millisecond}},
	}
	m := median(runs)
	require.Equal(t, 5000.0, m.DrainRate, "the median of the three that ran")
	require.Equal(t, 7*time.Millisecond, m.Lateness.P99, "the median run's lateness")
	require.Equal(t, []int{2, 1, 3}, []int{m.Early, m.Lost, m.Duplicated}, "every run's early, lost and duplicated")
	require.Equal(t, "middle", m.Notes[0])
	require.Contains(t, m.Notes[1], "median of 3 runs (9,000, 3,000, 5,000/s, in the order run)")
	require.Contains(t, m.Notes[2], "1 more runs did not run, the first because: pilot: broker gone")
	require.Len(t, runs[3].Notes, 1, "the runs themselves are left as they were")

	ceilings := median([]Result{{PublishRate: 2}, {PublishRate: 3}, {PublishRate: 1}})
	require.Equal(t, 2.0, ceilings.PublishRate, "a commit ceiling, with no drain, by its publish rate")
	one := Result{DrainRate: 1, Notes: []string{"only"}}
	require.Equal(t, one, median([]Result{one}), "one run is its own row")
	failed := median([]Result{{NotRun: "a"}, {NotRun: "b"}})
	require.Equal(t, "a", failed.NotRun)
}
