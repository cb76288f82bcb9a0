package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSQLiteScaleTargetsReadTheSQLiteRows: the SQLite targets compare the SQLite rows only, and
// the steering target fails on one call past 2× the empty store's.
func TestSQLiteScaleTargetsReadTheSQLiteRows(t *testing.T) {
	t.Parallel()
	empty := map[string]float64{"pending": 0, "store": 1000, "claim_p50_ms": 10, "claim_p99_ms": 20, "written_per_timeout_b": 5 * 1024, "read_per_timeout_b": 1024}
	full := map[string]float64{"pending": 1000000, "store": 800, "claim_p50_ms": 15, "claim_p99_ms": 30, "written_per_timeout_b": 10 * 1024, "read_per_timeout_b": 3 * 1024}
	for _, op := range steeringOps {
		empty[op.name+"_p50_ms"] = 0.02
		full[op.name+"_p50_ms"] = 0.03
	}
	results := []Result{
		{System: "SQLite store, 0 pending", Kind: KindScale, Figures: empty},
		{System: "SQLite store, 1,000,000 pending", Kind: KindScale, Figures: full},
		// PostgreSQL's rows are not SQLite's.
		{System: "PostgreSQL store, 0 pending", Kind: KindScale, Figures: map[string]float64{"pending": 0, "store": 1}},
		{System: "PostgreSQL store, 1,000,000 pending", Kind: KindScale, Figures: map[string]float64{"pending": 1000000, "store": 9000}},
	}
	goals := func() map[string]Target {
		got := map[string]Target{}
		for _, tg := range Targets(results) {
			got[tg.Goal] = tg
		}
		return got
	}
	const at = "SQLite at 1 M pending: "
	got := goals()
	require.Equal(t, "yes", got[at+"batch store rate within 25 % of the empty store's"].Met)
	require.Contains(t, got[at+"batch store rate within 25 % of the empty store's"].Measured, "5.0 KiB and 10.0 KiB written per timeout")
	require.Contains(t, got[at+"batch store rate within 25 % of the empty store's"].Measured, "1.0 KiB and 3.0 KiB read")
	require.Equal(t, "yes", got[at+"one claim's p99 ≤ 2× the empty store's"].Met)
	steer := got[at+"each steering call's p50 ≤ 2× the empty store's"]
	require.Equal(t, "yes", steer.Met)
	require.Contains(t, steer.Measured, "list_after 0.030 vs 0.020")

	full["get_p50_ms"] = 0.05
	steer = goals()[at+"each steering call's p50 ≤ 2× the empty store's"]
	require.Equal(t, "no", steer.Met, "get takes 2.5×")
	require.Contains(t, steer.Measured, "get 0.050 vs 0.020")
}

// The store targets stay on random ids; the rates with time-ordered ids are shown beside them,
// and only when both rows have them.
func TestStoreTargetsShowTheOrderedIDsBesideTheRandomOnes(t *testing.T) {
	t.Parallel()
	rows := func(system string, ordered bool) []Result {
		empty := map[string]float64{"pending": 0, "store": 1000}
		full := map[string]float64{"pending": 1000000, "store": 500}
		if ordered {
			empty["store_ordered"], full["store_ordered"] = 2000, 2100
		}
		return []Result{
			{System: system + ", 0 pending", Kind: KindScale, Figures: empty},
			{System: system + ", 1,000,000 pending", Kind: KindScale, Figures: full},
		}
	}
	for _, tc := range []struct{ system, goal string }{
		{"SQLite store", "SQLite at 1 M pending: batch store rate within 25 % of the empty store's"},
		{"PostgreSQL store", "PostgreSQL at 1,000,000 pending: store rate within 10 % of the empty store's"},
	} {
		find := func(results []Result) Target {
			for _, tg := range Targets(results) {
				if tg.Goal == tc.goal {
					return tg
				}
			}
			t.Fatalf("no target %q", tc.goal)
			return Target{}
		}
		got := find(rows(tc.system, true))
		require.Equal(t, "no", got.Met, "the ordered ids' rate must not decide the target")
		require.Contains(t, got.Measured, "with time-ordered ids 2,000/s empty, 2,100/s pending (+5 %)")
		require.NotContains(t, find(rows(tc.system, false)).Measured, "time-ordered")
	}
}
