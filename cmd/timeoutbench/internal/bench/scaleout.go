package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// KindScaleOut is the drain of one backlog by several `timeoutmill run` processes.
const KindScaleOut Kind = "scale-out"

// scaleOutSystem names the scale-out row of n instances.
func scaleOutSystem(n int) string {
	return fmt.Sprintf("RabbitMQ + PostgreSQL, %d × timeoutmill run", n)
}

// Scale-out settings.
const (
	// scaleOutLead is how far after the backlog is filled it falls due, at least: long enough for
	// every instance to start and wait for it, so that all of them drain it from its first second.
	scaleOutLead = 15 * time.Second
	// scaleOutTimeout is the longest one drain may take before the missing messages count as lost.
	scaleOutTimeout = 5 * time.Minute
	// dispatchedMetric is the counter of messages an instance forwarded, read from its
	// --metrics-addr endpoint after the drain: the per-instance split.
	dispatchedMetric = "timeoutmill_timeouts_dispatched_total"
	// failuresMetric counts an instance's failures, all stages together.
	failuresMetric = "timeoutmill_failures_total"
	// republishedMetric counts the due messages an instance published again one by one after
	// their batch's publish was refused.
	republishedMetric = "timeoutmill_dispatch_republished_alone_total"
	// scaleOutArgsEnv names the environment variable whose words are added to every instance's
	// command line, to drain under other settings than the service's defaults: a shorter
	// --call-timeout makes a loaded machine's overload come sooner, say.
	scaleOutArgsEnv = "TIMEOUTBENCH_SCALE_OUT_ARGS"
	// scaleOutCountsEnv names the environment variable that replaces the plan's numbers of
	// instances, separated by commas ("1,4"), to compare two counts in less time.
	scaleOutCountsEnv = "TIMEOUTBENCH_SCALE_OUT_INSTANCES"
)

// runScaleOut drains a backlog of Plan.ScaleOutBacklog timeouts, all due at one instant, with each
// of Plan.ScaleOutInstances counts of `timeoutmill run` processes on one PostgreSQL store and
// one RabbitMQ, Plan.Runs times each, the counts in turns. The backlog is filled by SQL before
// the instances start; each row's id is its message's UUID, so the application's consumer counts
// duplicates by id. Each instance's share is its dispatched counter.
func runScaleOut(ctx context.Context, env Env, plan Plan) ([]Result, error) {
	if env.Timeoutmill == "" {
		return nil, errors.New("no timeoutmill binary to run as the service (-timeoutmill)")
	}
	s, err := newScale(ctx, env)
	if err != nil {
		return nil, err
	}
	dest := "timeoutbench_so_" + watermill.NewShortUUID()
	defer func() {
		if err := errors.Join(s.close(), deleteQueues(env.AMQPURL, dest)); err != nil {
			env.logger().Error("Cleaning up after the scale-out scenario failed", err, nil)
		}
	}()
	if err := s.pub.DeclareQueues(ctx, dest); err != nil {
		return nil, err
	}
	counts, err := scaleOutCounts(plan.ScaleOutInstances)
	if err != nil {
		return nil, err
	}
	runs := make([][]Result, len(counts))
	for round := range plan.runs() {
		for turn := range counts {
			k := (turn + round) % len(counts)
			progress(env, "      %d instances draining %s, run %d of %d", counts[k], count(plan.ScaleOutBacklog), round+1, plan.runs())
			r, err := s.drainWith(ctx, dest, counts[k], plan.ScaleOutBacklog)
			if err != nil {
				r = Result{System: scaleOutSystem(counts[k]), Kind: KindScaleOut, NotRun: "failed: " + err.Error()}
			} else {
				// Each run's costs, not only the median's: the notes after the four that describe
				// the run's set-up and split.
				progress(env, "        drained at %s/s; %s", count(int(r.DrainRate)), strings.Join(r.Notes[min(4, len(r.Notes)):], "; "))
			}
			runs[k] = append(runs[k], r)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	out := make([]Result, len(counts))
	for k := range counts {
		out[k] = median(runs[k])
	}
	return out, nil
}

// drainWith starts n instances, lets them drain a backlog of size timeouts due at once, and
// stops them.
func (s *scale) drainWith(ctx context.Context, dest string, n, size int) (Result, error) {
	r := Result{System: scaleOutSystem(n), Kind: KindScaleOut, Messages: size}
	if err := s.truncate(ctx); err != nil {
		return r, err
	}
	run := watermill.NewShortUUID()
	start := time.Now()
	due, err := s.fillBacklog(ctx, run, dest, size)
	if err != nil {
		return r, err
	}
	filled := time.Since(start)

	msgs, closeReceiver, err := receiver(ctx, s.env.AMQPURL, dest)
	if err != nil {
		return r, err
	}
	defer closeReceiver()
	got := countDrain(msgs, size, due)

	instances := make([]*instance, 0, n)
	defer func() {
		for _, in := range instances {
			_ = in.stop()
		}
	}()
	for i := range n {
		in, err := s.startInstance(fmt.Sprintf("%s-%d", run, i+1))
		if err != nil {
			return r, err
		}
		instances = append(instances, in)
	}
	for i := range instances {
		err := instances[i].ready(ctx, time.Until(due))
		// freePort's port is free when chosen, not when the instance binds it: on a shared
		// machine another process may take it first. Such an instance is started again.
		for tries := 1; err != nil && instances[i].lostItsPort() && tries < 3; tries++ {
			var in *instance
			if in, err = s.startInstance(instances[i].name); err == nil {
				instances[i] = in
				err = in.ready(ctx, time.Until(due))
			}
		}
		if err != nil {
			return r, err
		}
	}

	watch, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	exited := anyExited(watch, instances)
	// The CPU and the database's counts are read from just before the claims start (the poller
	// claims and announces a few tens of milliseconds ahead) to the last arrival.
	cpu := newCPUWatch(s.env)
	select {
	case <-time.After(time.Until(due.Add(-cpuLead))):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	cpuFrom := cpu.sample(instances)
	pgFrom, pgErr := readPGActivity(ctx, s.db, s.table)
	var cpuTo cpuSample
	select {
	case <-got.all:
		cpuTo = cpu.sample(instances)
		time.Sleep(linger)
	case <-time.After(time.Until(due) + scaleOutTimeout):
		cpuTo = cpu.sample(instances)
	case in := <-exited:
		// A critical error (the store or the broker failing for --outage-wait) stops an
		// instance: the drain is not what the row would measure.
		err := in.exit()
		if err == nil {
			err = fmt.Errorf("instance %s exited", in.name)
		}
		return r, fmt.Errorf("during the drain, %w (%s of %s arrived)", err, count(got.tally().unique), count(size))
	case <-ctx.Done():
		return r, ctx.Err()
	}
	tl := got.tally()
	var batches [len(batchMetrics)]batchSizes
	split := make([]string, n)
	total, failures, republished := 0, 0, 0
	for i, in := range instances {
		v, err := in.counter(dispatchedMetric)
		if err != nil {
			return r, err
		}
		f, err := in.counter(failuresMetric)
		if err != nil {
			return r, err
		}
		a, err := in.counter(republishedMetric)
		if err != nil {
			return r, err
		}
		total += v
		failures += f
		republished += a
		split[i] = count(v)
		for j, name := range batchMetrics {
			if batches[j], err = in.addBatches(batches[j], name); err != nil {
				return r, err
			}
		}
	}
	var stopErrs []error
	for _, in := range instances {
		stopErrs = append(stopErrs, in.stop())
	}
	instances0 := instances
	instances = nil
	if err := errors.Join(stopErrs...); err != nil {
		return r, err
	}
	var cpuAll time.Duration
	for _, in := range instances0 {
		cpuAll += in.cpu()
	}
	pgTo, err := readPGActivity(ctx, s.db, s.table)
	pgErr = errors.Join(pgErr, err)
	var logged []string
	for _, in := range instances0 {
		if line, n := firstError(in.log); n > 0 {
			logged = append(logged, fmt.Sprintf("%s: %d, first: %s", in.name, n, line))
		}
	}

	r.Counted, r.Early, r.Lost, r.Duplicated = true, tl.early, size-tl.unique, tl.dups
	r.Lateness = newLateness(tl.lateness)
	if tl.unique > 0 && tl.last.After(due) {
		r.DrainRate = float64(tl.unique) / tl.last.Sub(due).Seconds()
	}
	r.Figures = map[string]float64{"drain": r.DrainRate, "instances": float64(n)}
	r.Notes = append(r.Notes,
		fmt.Sprintf("forwarded per instance (%s): %s = %s; %s: %d; %s: %d", dispatchedMetric, strings.Join(split, " + "), count(total),
			failuresMetric, failures, republishedMetric, republished),
		fmt.Sprintf("CPU of the instances, user + system, start to stop: %s (%s per 1,000 forwarded)",
			cpuAll.Round(10*time.Millisecond), perThousand(cpuAll, total)),
		fmt.Sprintf("backlog filled by SQL in %s before the instances started, due %s after; service defaults%s, --log-level error",
			filled.Round(100*time.Millisecond), scaleOutLead, extraArgs()),
		fmt.Sprintf("%d-byte payloads; duplicates counted by message id at the application's consumer", DefaultPayload))
	line, figures := cpu.report(cpuFrom, cpuTo, tl.unique)
	maps.Copy(r.Figures, figures)
	r.Notes = append(r.Notes, line, batchesNote(batches, r.Figures))
	if pgErr != nil {
		r.Notes = append(r.Notes, "PostgreSQL's counts not read: "+pgErr.Error())
	} else {
		r.Notes = append(r.Notes, pgNote(pgFrom, pgTo, tl.unique, r.Figures))
	}
	if len(logged) > 0 {
		r.Notes = append(r.Notes, "errors logged: "+strings.Join(logged, "; "))
	}
	return r, nil
}

// fillBacklog inserts size timeouts for dest, all due at one instant scaleOutLead after the
// insert ends, each id a message UUID, and returns that instant.
func (s *scale) fillBacklog(ctx context.Context, run, dest string, size int) (time.Time, error) {
	md := persistence.EncodeMetadata(map[string]string{HeaderRun: run})
	// Due in a day while inserting, then moved to its instant: the instant is set from how long
	// the insert took, so the update (as long) and the instances' start fit before it, however
	// loaded the machine.
	start := time.Now()
	if _, err := s.db.ExecContext(ctx, `INSERT INTO `+s.table+` (id, destination, due, available_at, owner, payload, metadata, failure_count)
SELECT $1 || '-' || g, $2, now() + interval '1 day', now() + interval '1 day', '', $3, $4, 0
FROM generate_series(1, $5::int) AS g`, run, dest, payload(DefaultPayload), md, size); err != nil {
		return time.Time{}, fmt.Errorf("filling the backlog: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `ANALYZE `+s.table); err != nil {
		return time.Time{}, fmt.Errorf("filling the backlog: %w", err)
	}
	due := time.Now().Add(scaleOutLead + 2*time.Since(start)).Truncate(time.Millisecond)
	if _, err := s.db.ExecContext(ctx, `UPDATE `+s.table+` SET due = $1, available_at = $1`, due); err != nil {
		return time.Time{}, fmt.Errorf("filling the backlog: %w", err)
	}
	if time.Until(due) < scaleOutLead/3 {
		return time.Time{}, fmt.Errorf("filling the backlog took until %s before it was due", time.Until(due))
	}
	return due, nil
}

// drainTally counts a drain's arrivals by message id.
type drainTally struct {
	mu       sync.Mutex
	due      time.Time
	seen     map[string]bool
	want     int
	dups     int
	early    int
	last     time.Time
	lateness []time.Duration
	all      chan struct{}
}

func countDrain(msgs <-chan *message.Message, want int, due time.Time) *drainTally {
	t := &drainTally{due: due, seen: make(map[string]bool, want), want: want, all: make(chan struct{})}
	go func() {
		for msg := range msgs {
			at := time.Now()
			msg.Ack()
			t.mu.Lock()
			if t.seen[msg.UUID] {
				t.dups++
				t.mu.Unlock()
				continue
			}
			t.seen[msg.UUID] = true
			if at.Before(t.due) {
				t.early++
			}
			t.last = at
			t.lateness = append(t.lateness, at.Sub(t.due))
			if len(t.seen) == t.want {
				close(t.all)
			}
			t.mu.Unlock()
		}
	}()
	return t
}

type drainCounts struct {
	unique, dups, early int
	last                time.Time
	lateness            []time.Duration
}

func (t *drainTally) tally() drainCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return drainCounts{unique: len(t.seen), dups: t.dups, early: t.early, last: t.last, lateness: append([]time.Duration(nil), t.lateness...)}
}

// instance is one `timeoutmill run` process of the scale-out scenario, serving its metrics and
// probes on a port of its own.
type instance struct {
	cmd     *exec.Cmd
	name    string
	log     string
	metrics string
	// exited is closed when the process has ended, with err its exit.
	exited chan struct{}
	err    error
}

func (s *scale) startInstance(name string) (*instance, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(s.env.TempDir, s.endpoint+"-"+name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"run",
		"--endpoint", s.endpoint, "--store", s.env.PostgresDSN, "--transport", s.env.AMQPURL,
		"--error-queue", s.errorQueue(), "--instance", name, "--metrics-addr", addr, "--log-level", "error"}
	cmd := exec.Command(s.env.Timeoutmill, append(args, strings.Fields(os.Getenv(scaleOutArgsEnv))...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", s.env.Timeoutmill, err)
	}
	in := &instance{cmd: cmd, name: name, log: logPath, metrics: "http://" + addr, exited: make(chan struct{})}
	go func() {
		in.err = cmd.Wait()
		_ = logFile.Close()
		close(in.exited)
	}()
	return in, nil
}

// stop ends the instance with SIGTERM, as an operator would, and waits for it.
func (in *instance) stop() error {
	select {
	case <-in.exited:
		return in.exit()
	default:
	}
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping instance %s: %w", in.name, err)
	}
	select {
	case <-in.exited:
		return in.exit()
	case <-time.After(time.Minute):
		_ = in.cmd.Process.Kill()
		return fmt.Errorf("instance %s did not stop within a minute; see %s", in.name, in.log)
	}
}

// lostItsPort is whether the instance ended because its --metrics-addr was taken.
func (in *instance) lostItsPort() bool {
	select {
	case <-in.exited:
	default:
		return false
	}
	b, err := os.ReadFile(in.log)
	return err == nil && strings.Contains(string(b), "--metrics-addr") && strings.Contains(string(b), "address already in use")
}

// cpu is the CPU time, user and system, the ended instance used.
func (in *instance) cpu() time.Duration {
	if in.cmd.ProcessState == nil {
		return 0
	}
	return in.cmd.ProcessState.UserTime() + in.cmd.ProcessState.SystemTime()
}

// perThousand is d for every 1,000 of n.
func perThousand(d time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return (d * 1000 / time.Duration(n)).Round(time.Millisecond)
}

// exit describes how the ended instance exited: nil for status 0, else with the last line of
// its log (a critical error's reason).
func (in *instance) exit() error {
	if in.err == nil {
		return nil
	}
	return fmt.Errorf("instance %s exited with %w: %s", in.name, in.err, lastLine(in.log))
}

// anyExited returns a channel closed when any of the instances has ended.
func anyExited(ctx context.Context, instances []*instance) <-chan *instance {
	out := make(chan *instance, len(instances))
	for _, in := range instances {
		go func() {
			select {
			case <-in.exited:
				out <- in
			case <-ctx.Done():
			}
		}()
	}
	return out
}

// ready waits until the instance's readiness probe answers 200, at most within.
func (in *instance) ready(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(in.metrics + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("instance %s was not ready before the backlog fell due; see %s", in.name, in.log)
		}
		select {
		case <-in.exited:
			return in.exit()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// counter reads the sum of a counter's series from the instance's metrics; 0 when it has none
// (a counter with labels shows no series before its first count).
func (in *instance) counter(name string) (int, error) {
	v, err := in.metric(name, "")
	return int(v), err
}

// metric reads the sum of the series of a metric whose labels include label (any series when
// label is ""); 0 when it has none.
func (in *instance) metric(name, label string) (float64, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(in.metrics + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("reading the metrics of %s: %w", in.name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") || !strings.Contains(line, label) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("reading the metrics of %s: %q: %w", in.name, line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading the metrics of %s: %w", in.name, err)
	}
	return sum, nil
}

// scaleOutCounts returns the numbers of instances from scaleOutCountsEnv, else planned.
func scaleOutCounts(planned []int) ([]int, error) {
	v := strings.TrimSpace(os.Getenv(scaleOutCountsEnv))
	if v == "" {
		return planned, nil
	}
	var counts []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: each number of instances must be a whole number of at least 1", scaleOutCountsEnv, v)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// extraArgs describes the instances' arguments from scaleOutArgsEnv, if any.
func extraArgs() string {
	if args := strings.TrimSpace(os.Getenv(scaleOutArgsEnv)); args != "" {
		return " but " + args
	}
	return ""
}

// lastLine is the last line of a log file.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "reading its log: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1][:min(len(lines[len(lines)-1]), 300)]
}

// firstError returns the first line of a service log and how many lines it has: the service
// runs with --log-level error, so every line is an error.
func firstError(path string) (string, int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "reading the log: " + err.Error(), 1
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return "", 0
	}
	return lines[0][:min(len(lines[0]), 300)], len(lines)
}

// freePort returns a loopback address with a port free at the time of the call.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
