package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

func TestParseCount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"10m": 10000000, "1M": 1000000, "100k": 100000, "2500": 2500, "0": 0, " 3m ": 3000000} {
		got, err := ParseCount(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "m", "ten", "-1", "1.5m", "10g"} {
		_, err := ParseCount(in)
		require.Error(t, err, in)
	}
}

// TestFullPlanScalesOut: the full run drains its scale-out backlog with 1, 2 and 4 instances; the
// quick run has neither scale scenario.
func TestFullPlanScalesOut(t *testing.T) {
	t.Parallel()
	full, err := PlanFor(Full)
	require.NoError(t, err)
	require.Equal(t, 100000, full.ScaleOutBacklog)
	require.Equal(t, []int{1, 2, 4}, full.ScaleOutInstances)
	quick, err := PlanFor(Quick)
	require.NoError(t, err)
	require.Zero(t, quick.ScalePending)
	require.Zero(t, quick.ScaleOutBacklog)
}

func TestScaleTargetsReadTheScaleRows(t *testing.T) {
	t.Parallel()
	empty := map[string]float64{"pending": 0, "store": 1000, "claim_p50_ms": 10, "claim_max_ms": 12, "rss_mib": 30, "stats_p50_ms": 2}
	full := map[string]float64{"pending": 10000000, "store": 950, "claim_p50_ms": 15, "claim_max_ms": 40, "rss_mib": 31, "stats_p50_ms": 20000}
	for _, op := range steeringOps {
		empty[op.name+"_p50_ms"] = 1
		full[op.name+"_p50_ms"] = 1.5
	}
	full["list_after_p50_ms"] = 2.5
	results := []Result{
		{System: "PostgreSQL store, 0 pending", Kind: KindScale, Figures: empty},
		{System: "PostgreSQL store, 10,000,000 pending", Kind: KindScale, Figures: full},
		// Another store's scale rows are not PostgreSQL's.
		{System: "SQLite store, 0 pending", Kind: KindScale, Figures: map[string]float64{"pending": 0, "store": 1}},
		{System: "SQLite store, 1,000,000 pending", Kind: KindScale, Figures: map[string]float64{"pending": 1000000, "store": 1}},
	}
	got := map[string]Target{}
	for _, tg := range Targets(results) {
		got[tg.Goal] = tg
	}
	const at = "PostgreSQL at 10,000,000 pending: "
	require.Equal(t, "yes", got[at+"store rate within 10 % of the empty store's"].Met)
	require.Contains(t, got[at+"store rate within 10 % of the empty store's"].Measured, "1,000/s empty, 950/s")
	require.Equal(t, "yes", got[at+"one claim ≤ 2× the empty store's"].Met)
	steer := got[at+"each steering call's p50 ≤ 2× the empty store's"]
	require.Equal(t, "no", steer.Met, "list after a cursor takes 2.5×")
	require.Contains(t, steer.Measured, "list_after 2.50 vs 1.00")
	require.Equal(t, "no", got[at+"Stats p50 ≤ 50 ms"].Met)
	require.Equal(t, "yes", got["service memory does not grow with the number pending"].Met)
}

func TestScaleOutTargets(t *testing.T) {
	t.Parallel()
	row := func(n int, drain float64, dups int) Result {
		return Result{System: scaleOutSystem(n), Kind: KindScaleOut, Counted: true, Duplicated: dups, DrainRate: drain,
			Figures: map[string]float64{"drain": drain, "instances": float64(n)}}
	}
	goals := func(results []Result) map[string]Target {
		got := map[string]Target{}
		for _, tg := range Targets(results) {
			got[tg.Goal] = tg
		}
		return got
	}
	const drainGoal, dupGoal = "scale-out: the drain with the most instances ≥ 0.9× the drain with one",
		"scale-out: 0 duplicates and 0 lost with any number of instances (no crash)"

	got := goals([]Result{row(1, 5000, 0), row(2, 5200, 0), row(4, 4600, 0)})
	require.Equal(t, "yes", got[drainGoal].Met)
	require.Contains(t, got[drainGoal].Measured, "4: 4,600/s (0.92×)")
	require.Equal(t, "yes", got[dupGoal].Met)

	got = goals([]Result{row(1, 5000, 0), row(2, 5200, 0), row(4, 4400, 3)})
	require.Equal(t, "no", got[drainGoal].Met, "0.88× is a collapse")
	require.Equal(t, "no", got[dupGoal].Met)
	require.Contains(t, got[dupGoal].Measured, "4 instances: 3 duplicated")

	got = goals([]Result{row(2, 5200, 0)})
	require.Equal(t, "—", got[drainGoal].Met, "no row of one instance to compare with")
}

// TestCountDrainCountsByMessageID: a drain counts each id once, a second arrival as a duplicate,
// and an arrival before the due time as early.
func TestCountDrainCountsByMessageID(t *testing.T) {
	t.Parallel()
	msgs := make(chan *message.Message, 4)
	due := time.Now().Add(time.Hour)
	tally := countDrain(msgs, 2, due)
	for _, id := range []string{"a", "a", "b"} {
		msgs <- message.NewMessage(id, nil)
	}
	select {
	case <-tally.all:
	case <-time.After(10 * time.Second):
		t.Fatal("both ids arrived but the drain did not end")
	}
	close(msgs)
	got := tally.tally()
	require.Equal(t, 2, got.unique)
	require.Equal(t, 1, got.dups)
	require.Equal(t, 2, got.early, "both arrived an hour before their due time")
	require.Len(t, got.lateness, 2)
}

// TestScaleTargetsWithoutAStoreRate: rows whose store rate could not be measured (the service
// stopped) leave the store-rate and memory targets unmeasured, not met by zeros.
func TestScaleTargetsWithoutAStoreRate(t *testing.T) {
	t.Parallel()
	rows := []Result{
		{System: "PostgreSQL store, 0 pending", Kind: KindScale, Figures: map[string]float64{"pending": 0, "claim_p50_ms": 1}},
		{System: "PostgreSQL store, 10,000,000 pending", Kind: KindScale, Figures: map[string]float64{"pending": 10000000, "claim_p50_ms": 1}},
	}
	got := map[string]Target{}
	for _, tg := range Targets(rows) {
		got[tg.Goal] = tg
	}
	require.Equal(t, "—", got["PostgreSQL at 10,000,000 pending: store rate within 10 % of the empty store's"].Met)
	require.Equal(t, "—", got["service memory does not grow with the number pending"].Met)
	require.Equal(t, "yes", got["PostgreSQL at 10,000,000 pending: one claim ≤ 2× the empty store's"].Met)
}

// TestPerThousand: the instances' CPU is reported per 1,000 messages forwarded, and as nothing
// when none were.
func TestPerThousand(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2*time.Second, perThousand(200*time.Second, 100000))
	require.Equal(t, 1500*time.Millisecond, perThousand(3*time.Second, 2000))
	require.Zero(t, perThousand(time.Second, 0))
}

// TestLostItsPort: an instance that ended because another process took its metrics port is told
// apart from one that failed otherwise or still runs.
func TestLostItsPort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	instanceWith := func(log string, ended bool) *instance {
		path := filepath.Join(dir, strconv.Itoa(len(log))+strconv.FormatBool(ended)+".log")
		require.NoError(t, os.WriteFile(path, []byte(log), 0o600))
		in := &instance{log: path, exited: make(chan struct{})}
		if ended {
			close(in.exited)
		}
		return in
	}
	taken := "timeoutmill: --metrics-addr: listen tcp 127.0.0.1:34311: bind: address already in use\n"
	require.True(t, instanceWith(taken, true).lostItsPort())
	require.False(t, instanceWith(taken, false).lostItsPort(), "still running")
	require.False(t, instanceWith("timeoutmill: store: connection refused\n", true).lostItsPort())
}

// TestScaleOutCountsFromTheEnvironment: the numbers of instances are the plan's unless the
// environment names others; a number that is not one is an error, not a skipped count.
func TestScaleOutCountsFromTheEnvironment(t *testing.T) {
	t.Setenv(scaleOutCountsEnv, "")
	got, err := scaleOutCounts([]int{1, 2, 4})
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 4}, got)
	t.Setenv(scaleOutCountsEnv, " 1, 4 ")
	got, err = scaleOutCounts([]int{1, 2, 4})
	require.NoError(t, err)
	require.Equal(t, []int{1, 4}, got)
	for _, bad := range []string{"1,,4", "0", "two", "1;4"} {
		t.Setenv(scaleOutCountsEnv, bad)
		_, err = scaleOutCounts([]int{1})
		require.ErrorContains(t, err, scaleOutCountsEnv, bad)
	}
}
