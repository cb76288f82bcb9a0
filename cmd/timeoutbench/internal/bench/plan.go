package bench

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Mode chooses how much a run measures.
type Mode string

// The modes of a run.
const (
	// Full is the whole suite with the counts: about 15 minutes on 2 cores.
	Full Mode = "full"
	// Quick is every scenario with small counts and no scale scenario: under 2 minutes.
	Quick Mode = "quick"
)

// Plan is how much each workload sends. PlanFor gives the plan of a mode; tests shrink it.
type Plan struct {
	Mode Mode

	// PrecisionRate messages a second for PrecisionDuration, each delayed by a random time in
	// [MinDelay, MaxDelay).
	PrecisionRate     int
	PrecisionDuration time.Duration
	MinDelay          time.Duration
	MaxDelay          time.Duration

	// Backlog messages due at one instant; BacklogSQL for the systems that move every message
	// through SQL tables (the watermill-sql peer and the SQL transport). The modes give both the
	// same count: the peer's first delivery waits for its once-a-second poll, and only a backlog
	// that takes it seconds to drain makes that wait a small part of its drain.
	Backlog    int
	BacklogSQL int

	// CeilingMessages are sent through each raw path (broker round trip, dead-letter path);
	// CommitTime is how long each raw commit rate is measured.
	CeilingMessages int
	CommitTime      time.Duration

	// ScalePending timeouts fill the PostgreSQL store of the scale scenario; 0 skips it.
	// ScaleStores is how many delayed messages measure the store rate at each size.
	ScalePending int
	ScaleStores  int

	// ScaleOutBacklog timeouts due at one instant are drained by each of ScaleOutInstances
	// counts of `timeoutmill run` processes sharing one store and broker; 0 skips it.
	ScaleOutBacklog   int
	ScaleOutInstances []int

	// Runs is how many times each backlog and each ceiling runs. Its row is the run with the
	// median drain rate, with the early, lost and duplicated messages of every run, and a note
	// listing each run's rate. A ratio target divides two such medians: one run cannot decide
	// one, as the watermill-sql peer's drain depends on where its once-a-second poll falls, and
	// the broker's round trip varies between runs minutes apart.
	Runs int

	// Payload is the size in bytes of every message's body; 0 means DefaultPayload.
	Payload int

	// Grace is how long a workload waits for the last messages after they were due before it
	// counts the missing ones as lost.
	Grace time.Duration
}

// PlanFor returns the plan of mode.
func PlanFor(mode Mode) (Plan, error) {
	switch mode {
	case Full:
		return Plan{
			Mode:              Full,
			PrecisionRate:     200,
			PrecisionDuration: 20 * time.Second,
			MinDelay:          time.Second,
			MaxDelay:          5 * time.Second,
			Backlog:           20000,
			BacklogSQL:        20000,
			CeilingMessages:   20000,
			CommitTime:        3 * time.Second,
			ScalePending:      1000000,
			ScaleStores:       30000,
			ScaleOutBacklog:   100000,
			ScaleOutInstances: ScaleOutInstances(),
			Runs:              3,
			Grace:             20 * time.Second,
		}, nil
	case Quick:
		return Plan{
			Mode:              Quick,
			PrecisionRate:     100,
			PrecisionDuration: 3 * time.Second,
			MinDelay:          time.Second,
			MaxDelay:          2500 * time.Millisecond,
			Backlog:           2000,
			BacklogSQL:        2000,
			CeilingMessages:   3000,
			CommitTime:        time.Second,
			Runs:              1,
			Grace:             10 * time.Second,
		}, nil
	}
	return Plan{}, fmt.Errorf("bench: unknown mode %q (want %q or %q)", mode, Full, Quick)
}

// runs is Runs, at least one.
func (p Plan) runs() int { return max(1, p.Runs) }

// ScaleOutInstances returns the numbers of `timeoutmill run` processes the scale-out scenario
// compares.
func ScaleOutInstances() []int { return []int{1, 2, 4} }

// ParseCount reads a count as a number, or with a k (thousands) or m (millions) suffix: "10m" is
// 10,000,000.
func ParseCount(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	unit := 1
	switch {
	case strings.HasSuffix(t, "m"):
		unit, t = 1000000, strings.TrimSuffix(t, "m")
	case strings.HasSuffix(t, "k"):
		unit, t = 1000, strings.TrimSuffix(t, "k")
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bench: %q is not a count (a number, or with k or m: 10m)", s)
	}
	return n * unit, nil
}
