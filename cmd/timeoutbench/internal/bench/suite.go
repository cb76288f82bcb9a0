package bench

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// Ceiling measures a raw path of the machine, without any delay mechanism.
type Ceiling struct {
	Name  string
	Needs []string
	Run   func(ctx context.Context, env Env, plan Plan) (Result, error)
}

// Suite is what one run measures.
type Suite struct {
	Plan     Plan
	Systems  []System
	Ceilings []Ceiling
	// Scale runs the scale scenario when Plan.ScalePending > 0.
	Scale func(ctx context.Context, env Env, plan Plan) ([]Result, error)
	// ScaleOut runs the scale-out scenario when Plan.ScaleOutBacklog > 0.
	ScaleOut func(ctx context.Context, env Env, plan Plan) ([]Result, error)
	// ScaleSQLite runs the SQLite store's scale scenario when Plan.ScalePending > 0.
	ScaleSQLite func(ctx context.Context, env Env, plan Plan) ([]Result, error)
	// Only, when set, keeps the rows whose name it matches.
	Only *regexp.Regexp
}

// DefaultSuite is every scenario of the benchmark.
func DefaultSuite(plan Plan) Suite {
	return Suite{
		Plan:     plan,
		Systems:  Systems(plan),
		Ceilings: Ceilings(),
		Scale:    runScale,
		ScaleOut: runScaleOut,
		// The embedded store at its own size, through its API: no server needed.
		ScaleSQLite: runScaleSQLite,
	}
}

func (s Suite) wants(name string) bool {
	return s.Only == nil || s.Only.MatchString(name)
}

// Run runs the suite and returns its rows in order: ceilings, then each system's precision and
// backlog, then scale, then scale-out. A scenario that fails is a row saying why; Run fails only when ctx ends.
func (s Suite) Run(ctx context.Context, env Env) ([]Result, error) {
	var results []Result
	add := func(r Result) {
		results = append(results, r)
		progress(env, "done  %s (%s)", r.Name(), summary(r))
	}
	for _, c := range s.Ceilings {
		probe := Result{System: c.Name, Kind: KindCeiling}
		if !s.wants(probe.Name()) {
			continue
		}
		if why := (System{Needs: c.Needs}).missing(env); why != "" {
			probe.NotRun = why
			add(probe)
			continue
		}
		var runs []Result
		for i := range s.Plan.runs() {
			progress(env, "start %s%s", probe.Name(), runLabel(i, s.Plan.runs()))
			r, err := c.Run(ctx, env, s.Plan)
			if err != nil {
				r = probe
				r.NotRun = "failed: " + err.Error()
			}
			runs = append(runs, r)
			if ctx.Err() != nil {
				break
			}
		}
		add(median(runs))
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	for _, sys := range s.Systems {
		kinds := []Kind{}
		for _, k := range []Kind{KindPrecision, KindBacklog} {
			if len(sys.Kinds) > 0 && !slices.Contains(sys.Kinds, k) {
				continue
			}
			if s.wants(Result{System: sys.Name, Kind: k}.Name()) {
				kinds = append(kinds, k)
			}
		}
		if len(kinds) == 0 {
			continue
		}
		for _, r := range s.runSystem(ctx, env, sys, kinds) {
			add(r)
		}
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	if s.Scale != nil && s.Plan.ScalePending > 0 && s.wants(Result{System: "PostgreSQL store", Kind: KindScale}.Name()) {
		probe := Result{System: "PostgreSQL store", Kind: KindScale}
		if why := (System{Needs: []string{"rabbitmq", "postgres"}}).missing(env); why != "" {
			probe.NotRun = why
			add(probe)
		} else {
			progress(env, "start %s", probe.Name())
			rs, err := s.Scale(ctx, env, s.Plan)
			if err != nil {
				probe.NotRun = "failed: " + err.Error()
				rs = append(rs, probe)
			}
			for _, r := range rs {
				add(r)
			}
		}
	}
	if s.ScaleSQLite != nil && s.Plan.ScalePending > 0 && s.wants(Result{System: "SQLite store", Kind: KindScale}.Name()) {
		probe := Result{System: "SQLite store", Kind: KindScale}
		progress(env, "start %s", probe.Name())
		rs, err := s.ScaleSQLite(ctx, env, s.Plan)
		if err != nil {
			probe.NotRun = "failed: " + err.Error()
			rs = append(rs, probe)
		}
		for _, r := range rs {
			add(r)
		}
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	if s.ScaleOut != nil && s.Plan.ScaleOutBacklog > 0 && len(s.Plan.ScaleOutInstances) > 0 && s.wantsScaleOut() {
		probe := Result{System: scaleOutSystem(s.Plan.ScaleOutInstances[0]), Kind: KindScaleOut}
		if why := (System{Needs: []string{"rabbitmq", "postgres"}}).missing(env); why != "" {
			probe.NotRun = why
			add(probe)
		} else {
			progress(env, "start %s", KindScaleOut)
			rs, err := s.ScaleOut(ctx, env, s.Plan)
			if err != nil {
				probe.NotRun = "failed: " + err.Error()
				rs = append(rs, probe)
			}
			for _, r := range rs {
				add(r)
			}
		}
	}
	return results, ctx.Err()
}

// wantsScaleOut is whether Only matches the row of any of the scale-out's instance counts.
func (s Suite) wantsScaleOut() bool {
	for _, n := range s.Plan.ScaleOutInstances {
		if s.wants(Result{System: scaleOutSystem(n), Kind: KindScaleOut}.Name()) {
			return true
		}
	}
	return false
}

// runSystem opens sys once and runs the workloads on it.
func (s Suite) runSystem(ctx context.Context, env Env, sys System, kinds []Kind) []Result {
	rows := func(why string) []Result {
		out := make([]Result, len(kinds))
		for i, k := range kinds {
			out[i] = Result{System: sys.Name, Kind: k, NotRun: why}
		}
		return out
	}
	if why := sys.missing(env); why != "" {
		return rows(why)
	}
	progress(env, "start %s", sys.Name)
	dest := "timeoutbench_" + watermill.NewShortUUID()
	rig, err := sys.Open(ctx, env, dest)
	if err != nil {
		return rows("failed to set up: " + err.Error())
	}
	in := receive(rig.Arrivals)
	plan := s.Plan
	if sys.Payload > 0 {
		plan.Payload = sys.Payload
	}
	w := workload{plan: plan, sys: sys, rig: rig, in: in, dest: dest}
	var out []Result
	for _, k := range kinds {
		switch k {
		case KindPrecision:
			out = append(out, w.precision(ctx))
		case KindBacklog:
			n := s.Plan.Backlog
			if sys.SQL {
				n = s.Plan.BacklogSQL
			}
			var runs []Result
			for i := range s.Plan.runs() {
				if i > 0 {
					progress(env, "      backlog, run %d of %d", i+1, s.Plan.runs())
				}
				runs = append(runs, w.backlog(ctx, n))
				if ctx.Err() != nil {
					break
				}
			}
			out = append(out, median(runs))
		}
		if ctx.Err() != nil {
			break
		}
	}
	for i := range out {
		out[i].Reference = sys.Reference
		out[i].Notes = append(out[i].Notes, fmt.Sprintf("%d-byte payloads", len(plan.payload())))
	}
	if err := rig.Close(); err != nil {
		out[len(out)-1].Notes = append(out[len(out)-1].Notes, "closing: "+err.Error())
	}
	select {
	case <-in.done:
	case <-time.After(10 * time.Second):
		env.logger().Error("The destination's subscription did not end after Close", nil, watermill.LogFields{"system": sys.Name})
	}
	return out
}

func summary(r Result) string {
	switch {
	case r.NotRun != "":
		return "not run: " + r.NotRun
	case r.Lateness != nil:
		return fmt.Sprintf("publish %s/s, drain %s/s, p99 %s ms, early %d, lost %d, dup %d",
			rate(r.PublishRate), rate(r.DrainRate), millis(r.Lateness.P99), r.Early, r.Lost, r.Duplicated)
	default:
		return fmt.Sprintf("publish %s/s, drain %s/s", rate(r.PublishRate), rate(r.DrainRate))
	}
}

func progress(env Env, format string, args ...any) {
	if env.Progress != nil {
		fmt.Fprintf(env.Progress, "[timeoutbench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}
