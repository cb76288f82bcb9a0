// Command timeoutbench measures timeoutmill's delayed delivery beside its peers on this machine,
// in one run, and prints one table: per scenario the messages sent, the publish rate, the drain
// rate, lateness p50/p99/max, and how many arrived early, were lost or were duplicated; then the
// issue's targets, met or not. The table is also written as Markdown to a file it names.
//
//	make bench               # full run, about 25 minutes on 2 cores
//	BENCH=quick make bench   # every scenario with small counts, under 2 minutes
//	go run ./cmd/timeoutbench -mode quick -run 'GoChannel'
//
// It starts the RabbitMQ, PostgreSQL, Redis and NATS it needs with scripts/services.sh, as a set
// of servers of its own (/tmp/timeoutmill-bench, ports 5702, 5462, 6399 and 4242), and stops
// those it started unless -keep-services is given (or KEEP_SERVICES=1). With -services "" it uses
// the servers named by TIMEOUTMILL_TEST_AMQP_URL, TIMEOUTMILL_TEST_POSTGRES_DSN,
// TIMEOUTMILL_TEST_REDIS_URL and TIMEOUTMILL_TEST_NATS_URL, and shows the scenarios needing a
// missing one as not run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/timeoutmill/timeoutmill/cmd/timeoutbench/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command line.
type options struct {
	mode         string
	out          string
	only         string
	script       string
	keep         bool
	timeoutmill  string
	verbose      bool
	backlog      int
	backlogSQL   int
	runs         int
	rate         int
	duration     time.Duration
	ceilingCount int
	payload      int
	scale        string
	scaleOut     string
	cpuProfile   string
	trace        string
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("timeoutbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mode, "mode", string(bench.Full), "full (about 25 min) or quick (under 2 min, no scale scenario)")
	fs.StringVar(&o.out, "out", "", "Markdown file to write the results to (default: timeoutbench-<mode>-<time>.md in the temporary directory)")
	fs.StringVar(&o.only, "run", "", "run only the scenarios whose name matches this regular expression")
	fs.StringVar(&o.script, "services", "scripts/services.sh", `script that starts the servers; "" to use TIMEOUTMILL_TEST_AMQP_URL and TIMEOUTMILL_TEST_POSTGRES_DSN as set`)
	fs.BoolVar(&o.keep, "keep-services", os.Getenv("KEEP_SERVICES") == "1", "leave the servers this run started running")
	fs.StringVar(&o.timeoutmill, "timeoutmill", "", "built cmd/timeoutmill to run as the service of the scale scenario (default: go build it)")
	fs.BoolVar(&o.verbose, "v", false, "log the systems' warnings and information, not only their errors")
	fs.IntVar(&o.backlog, "backlog", 0, "messages of each backlog (default: the mode's)")
	fs.IntVar(&o.backlogSQL, "backlog-sql", 0, "messages of the SQL systems' backlogs (default: the mode's)")
	fs.IntVar(&o.runs, "runs", 0, "runs of each backlog and ceiling, reported by their median (default: the mode's, 3 in full mode)")
	fs.IntVar(&o.rate, "precision-rate", 0, "messages a second of the precision stream (default: the mode's)")
	fs.DurationVar(&o.duration, "precision-duration", 0, "length of the precision stream (default: the mode's)")
	fs.IntVar(&o.ceilingCount, "ceiling-messages", 0, "messages through each raw broker path (default: the mode's)")
	fs.IntVar(&o.payload, "payload", 0, "bytes in every message's body, in every scenario (default 64; 1024 for realistic payloads)")
	fs.StringVar(&o.scale, "scale", os.Getenv("BENCH_SCALE"), "timeouts pending in the PostgreSQL scale rows, as a count or with k or m (10m); 0 skips them (default: the mode's, 1m in full mode; BENCH_SCALE)")
	fs.StringVar(&o.scaleOut, "scale-out", "", "timeouts of the backlog 1, 2 and 4 timeoutmill run processes drain, as a count or with k or m; 0 skips it (default: the mode's, 100k in full mode)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (every system runs in this process) to this file")
	fs.StringVar(&o.trace, "trace", "", "write an execution trace of the whole run to this file (go tool trace -pprof=net|sync|sched shows where it waits)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return o, nil
}

func (o options) plan() (bench.Plan, error) {
	plan, err := bench.PlanFor(bench.Mode(o.mode))
	if err != nil {
		return plan, err
	}
	override := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	override(&plan.Backlog, o.backlog)
	override(&plan.BacklogSQL, o.backlogSQL)
	override(&plan.Runs, o.runs)
	override(&plan.PrecisionRate, o.rate)
	override(&plan.CeilingMessages, o.ceilingCount)
	override(&plan.Payload, o.payload)
	if o.duration > 0 {
		plan.PrecisionDuration = o.duration
	}
	if o.scale != "" {
		n, err := bench.ParseCount(o.scale)
		if err != nil {
			return plan, fmt.Errorf("-scale (BENCH_SCALE): %w", err)
		}
		plan.ScalePending = n
	}
	if o.scaleOut != "" {
		n, err := bench.ParseCount(o.scaleOut)
		if err != nil {
			return plan, fmt.Errorf("-scale-out: %w", err)
		}
		plan.ScaleOutBacklog = n
		if len(plan.ScaleOutInstances) == 0 {
			plan.ScaleOutInstances = bench.ScaleOutInstances()
		}
	}
	return plan, nil
}

// run runs the benchmark and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "timeoutbench:", err)
		return 2
	}
	if err := benchmark(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "timeoutbench:", err)
		return 1
	}
	return 0
}

func benchmark(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	plan, err := o.plan()
	if err != nil {
		return err
	}
	suite := bench.DefaultSuite(plan)
	if o.only != "" {
		if suite.Only, err = regexp.Compile(o.only); err != nil {
			return fmt.Errorf("-run: %w", err)
		}
	}
	tmp, err := os.MkdirTemp("", "timeoutbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	level := slog.LevelError
	if o.verbose {
		level = slog.LevelInfo
	}
	env := bench.Env{
		TempDir:  tmp,
		Logger:   bench.NewLogger(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		Progress: stderr,
	}
	if o.script != "" {
		svc := newServices(o.script, stderr)
		if env.AMQPURL, env.PostgresDSN, err = svc.up(ctx); err != nil {
			return err
		}
		env.RedisURL, env.NATSURL = svc.streams()
		if !o.keep {
			defer func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
				defer cancel()
				err = errors.Join(err, svc.stop(ctx))
			}()
		}
	} else {
		env.AMQPURL = os.Getenv("TIMEOUTMILL_TEST_AMQP_URL")
		env.PostgresDSN = os.Getenv("TIMEOUTMILL_TEST_POSTGRES_DSN")
		env.RedisURL = os.Getenv("TIMEOUTMILL_TEST_REDIS_URL")
		env.NATSURL = os.Getenv("TIMEOUTMILL_TEST_NATS_URL")
	}
	env.Timeoutmill = o.timeoutmill
	if env.Timeoutmill == "" && (plan.ScalePending > 0 || plan.ScaleOutBacklog > 0) {
		env.Timeoutmill = buildTimeoutmill(ctx, tmp, stderr)
	}

	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	if o.trace != "" {
		stop, err := startTrace(o.trace)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	started := time.Now()
	loadBefore := loadAverage()
	results, runErr := suite.Run(ctx, env)
	header := fmt.Sprintf("timeoutbench, %s mode, %s; %d CPUs, GOMAXPROCS %d, %s; load average %s before, %s after; %s",
		plan.Mode, started.Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(),
		loadBefore, loadAverage(), time.Since(started).Round(time.Second))
	targets := bench.Targets(results)

	fmt.Fprintln(stdout, header)
	fmt.Fprintln(stdout)
	if err := bench.WriteText(stdout, results); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := bench.WriteTargets(stdout, targets); err != nil {
		return err
	}
	path, err := writeMarkdown(o.out, plan.Mode, header, results, targets)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nMarkdown: %s\n", path)
	return runErr
}

func writeMarkdown(path string, mode bench.Mode, header string, results []bench.Result, targets []bench.Target) (string, error) {
	if path == "" {
		path = filepath.Join(os.TempDir(), fmt.Sprintf("timeoutbench-%s-%s.md", mode, time.Now().Format("20060102-150405")))
	}
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("writing the results: %w", err)
	}
	fmt.Fprintf(f, "# timeoutbench\n\n%s\n\n", header)
	err = errors.Join(
		bench.WriteMarkdown(f, results),
		func() error { _, err := io.WriteString(f, "\n## Targets\n\n"); return err }(),
		bench.WriteTargets(f, targets),
		f.Close(),
	)
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// buildTimeoutmill builds the service the scale and scale-out scenarios run, from the module in the current
// directory. On failure the scale rows say there was no service to run.
func buildTimeoutmill(ctx context.Context, dir string, log io.Writer) string {
	path := filepath.Join(dir, "timeoutmill")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/timeoutmill")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(log, "timeoutbench: building ./cmd/timeoutmill for the scale scenario failed: %v\n", err)
		return ""
	}
	return path
}

func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("-cpuprofile: %w", err), f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

func startTrace(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		return nil, errors.Join(fmt.Errorf("-trace: %w", err), f.Close())
	}
	return func() error {
		trace.Stop()
		return f.Close()
	}, nil
}

// loadAverage is the one-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if fields := strings.Fields(string(b)); len(fields) > 0 {
		return fields[0]
	}
	return "?"
}
