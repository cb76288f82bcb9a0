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
	got := targetsByGoal(results)
	require.Equal(t, "no", got["early = 0 in every timeoutmill scenario"].Met)
	require.NotContains(t, got["early = 0 in every timeoutmill scenario"].Measured, nativePlainName, "a yardstick is not timeoutmill")
	rmqPrecision := got["precision p99 ≤ its one-hop yardstick's p99 + 5 ms, RabbitMQ + PostgreSQL"]
	require.Equal(t, "—", rmqPrecision.Met, "without its yardstick a broker row is not measured, however low its p99")
	require.Contains(t, rmqPrecision.Measured, "p99 4.0 ms; "+timerHopRabbitMQ+" not measured in this run")
	require.Equal(t, "no", got["precision p99 ≤ 5 ms, GoChannel + SQLite"].Met)
	require.Equal(t, "—", got["precision p99 ≤ 5 ms, GoChannel + memory"].Met, "not run")
	roundTrip := got["drain RabbitMQ + PostgreSQL ≥ 0.7× the raw round trip"]
	require.Equal(t, "no", roundTrip.Met, "4,600/s is 0.51× of 9,000/s")
	require.Contains(t, roundTrip.Measured, "4,600/s vs 9,000/s = 0.51×; 1 KB payloads: 4,000/s = 0.44×")
	require.Equal(t, "no", got["drain RabbitMQ + PostgreSQL above the one-hop dead-letter path (a TTL queue)"].Met)
	// 20,000 through a 9,000/s round trip take 2,222 ms: 1,200 ms is 0.54× of it.
	ratio := got["RabbitMQ + PostgreSQL backlog delivered with p99 lateness ≤ 2× the raw round trip's time for the same count"]
	require.Equal(t, "yes", ratio.Met)
	require.Contains(t, ratio.Measured, "0.54×")
	for goal := range got {
		require.NotContains(t, goal, "≤ 1 s", "the absolute bound on the backlog's lateness is retired")
	}
	require.Equal(t, "no", got["drain GoChannel + memory ≥ 0.8× the GoChannel relay"].Met)
	require.Equal(t, "—", got["drain GoChannel + SQLite ≥ 0.4× the GoChannel relay"].Met, "not run")
	require.Equal(t, "yes", got["drain RabbitMQ native ≥ 0.9× the plain client on the same topology"].Met)
}

// targetsByGoal checks results and returns the targets by goal.
func targetsByGoal(results []Result) map[string]Target {
	got := map[string]Target{}
	for _, tg := range Targets(results) {
		got[tg.Goal] = tg
	}
	return got
}

// TestRoundTripTargetIsSevenTenths: RabbitMQ + PostgreSQL must drain at 0.7× the raw round trip
// measured in the same run; without either row the target is not measured.
func TestRoundTripTargetIsSevenTenths(t *testing.T) {
	t.Parallel()
	const goal = "drain RabbitMQ + PostgreSQL ≥ 0.7× the raw round trip"
	rows := func(drain float64) []Result {
		return []Result{
			{System: ceilingRoundTrip, Kind: KindCeiling, Figures: map[string]float64{"drain": 10000}},
			{System: "RabbitMQ + PostgreSQL", Kind: KindBacklog, Counted: true, Figures: map[string]float64{"drain": drain}},
		}
	}
	require.Equal(t, "yes", targetsByGoal(rows(7000))[goal].Met)
	require.Contains(t, targetsByGoal(rows(7000))[goal].Measured, "7,000/s vs 10,000/s = 0.70×")
	require.Equal(t, "no", targetsByGoal(rows(6900))[goal].Met)
	for i := range 2 {
		only := append(rows(9000)[:i:i], rows(9000)[i+1:]...)
		require.Equal(t, "—", targetsByGoal(only)[goal].Met, "without %s", rows(9000)[i].System)
		require.Equal(t, notMeasured, targetsByGoal(only)[goal].Measured)
	}
}

// TestPrecisionTargetsReadEachBrokerRowAgainstItsOwnYardstick: each broker row's p99 may exceed
// the p99 of its broker's one-hop yardstick by 5 ms, and no more; another broker's yardstick
// does not stand in for a missing one. The embedded rows are held to 5 ms.
func TestPrecisionTargetsReadEachBrokerRowAgainstItsOwnYardstick(t *testing.T) {
	t.Parallel()
	precision := func(system string, p99 time.Duration) Result {
		return Result{System: system, Kind: KindPrecision, Counted: true, Lateness: &Lateness{P50: p99 / 4, P99: p99}}
	}
	brokers := brokerSystems()
	require.Len(t, brokers, 4)
	for _, b := range brokers {
		t.Run(b.system, func(t *testing.T) {
			t.Parallel()
			goal := "precision p99 ≤ its one-hop yardstick's p99 + 5 ms, " + b.system
			// Every other broker's yardstick is there, and low: none of them may count for this row.
			var others []Result
			for _, o := range brokers {
				if o.yardstick != b.yardstick {
					others = append(others, precision(o.yardstick, time.Millisecond))
				}
			}
			check := func(p99 time.Duration, withYardstick bool) Target {
				rows := append([]Result{precision(b.system, p99)}, others...)
				if withYardstick {
					rows = append(rows, precision(b.yardstick, 7*time.Millisecond))
				}
				return targetsByGoal(rows)[goal]
			}
			met := check(12*time.Millisecond, true)
			require.Equal(t, "yes", met.Met)
			require.Contains(t, met.Measured, "p99 12.0 ms vs one hop from a timer p99 7.0 ms (p50 1.8 ms): bound 12.0 ms; 5.0 ms above the yardstick's p99")
			notMet := check(12*time.Millisecond+100*time.Microsecond, true)
			require.Equal(t, "no", notMet.Met)
			below := check(6*time.Millisecond, true)
			require.Equal(t, "yes", below.Met)
			require.Contains(t, below.Measured, "1.0 ms below the yardstick's p99")
			noYardstick := check(2*time.Millisecond, false)
			require.Equal(t, "—", noYardstick.Met, "a row whose yardstick did not run is never met")
			require.Contains(t, noYardstick.Measured, b.yardstick+" not measured in this run")
			noRow := targetsByGoal(append(others, precision(b.yardstick, 7*time.Millisecond)))[goal]
			require.Equal(t, "—", noRow.Met)
			require.Equal(t, notMeasured, noRow.Measured)
		})
	}
	for _, sys := range []string{"GoChannel + memory", "GoChannel + SQLite"} {
		goal := "precision p99 ≤ 5 ms, " + sys
		require.Equal(t, "yes", targetsByGoal([]Result{precision(sys, 5*time.Millisecond)})[goal].Met)
		require.Equal(t, "no", targetsByGoal([]Result{precision(sys, 5*time.Millisecond+100*time.Microsecond)})[goal].Met)
		require.Equal(t, "—", targetsByGoal(nil)[goal].Met)
	}
}

// TestSQLTransportTargetIsTwiceThePeer: the SQL transport's drain must be twice the
// watermill-sql peer's backlog row.
func TestSQLTransportTargetIsTwiceThePeer(t *testing.T) {
	t.Parallel()
	const goal = "drain SQL transport ≥ 2× the watermill-sql peer"
	rows := func(drain float64) []Result {
		return []Result{
			{System: sqlTransport().Name, Kind: KindBacklog, Counted: true, Figures: map[string]float64{"drain": drain}},
			{System: watermillPeer().Name, Kind: KindBacklog, Counted: true, Reference: true, Figures: map[string]float64{"drain": 5000}},
		}
	}
	require.Equal(t, "yes", targetsByGoal(rows(10000))[goal].Met)
	require.Equal(t, "no", targetsByGoal(rows(9900))[goal].Met)
	require.Equal(t, "—", targetsByGoal(rows(10000)[:1])[goal].Met, "without the peer's row")
	require.Equal(t, "—", targetsByGoal(rows(10000)[1:])[goal].Met, "without the SQL transport's row")
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
