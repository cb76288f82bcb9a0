package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	// scaleOutLead is how far after the backlog is filled it falls due: long enough for every
	// instance to start and wait for it, so that all of them drain it from its first second.
	scaleOutLead = 15 * time.Second
	// scaleOutTimeout is the longest one drain may take before the missing messages count as lost.
	scaleOutTimeout = 5 * time.Minute
	// dispatchedMetric is the counter of messages an instance forwarded, read from its
	// --metrics-addr endpoint after the drain: the per-instance split.
	dispatchedMetric = "timeoutmill_timeouts_dispatched_total"
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
	counts := plan.ScaleOutInstances
	runs := make([][]Result, len(counts))
	for round := range plan.runs() {
		for turn := range counts {
			k := (turn + round) % len(counts)
			progress(env, "      %d instances draining %s, run %d of %d", counts[k], count(plan.ScaleOutBacklog), round+1, plan.runs())
			r, err := s.drainWith(ctx, dest, counts[k], plan.ScaleOutBacklog)
			if err != nil {
				r = Result{System: scaleOutSystem(counts[k]), Kind: KindScaleOut, NotRun: "failed: " + err.Error()}
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
	for _, in := range instances {
		if err := in.ready(ctx, time.Until(due)); err != nil {
			return r, err
		}
	}

	select {
	case <-got.all:
		time.Sleep(linger)
	case <-time.After(time.Until(due) + scaleOutTimeout):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	tl := got.tally()
	split := make([]string, n)
	total := 0
	for i, in := range instances {
		v, err := in.dispatched()
		if err != nil {
			return r, err
		}
		total += v
		split[i] = count(v)
	}
	var stopErrs []error
	for _, in := range instances {
		stopErrs = append(stopErrs, in.stop())
	}
	instances = nil
	if err := errors.Join(stopErrs...); err != nil {
		return r, err
	}

	r.Counted, r.Early, r.Lost, r.Duplicated = true, tl.early, size-tl.unique, tl.dups
	r.Lateness = newLateness(tl.lateness)
	if tl.unique > 0 && tl.last.After(due) {
		r.DrainRate = float64(tl.unique) / tl.last.Sub(due).Seconds()
	}
	r.Figures = map[string]float64{"drain": r.DrainRate, "instances": float64(n)}
	r.Notes = append(r.Notes,
		fmt.Sprintf("forwarded per instance (%s): %s = %s", dispatchedMetric, strings.Join(split, " + "), count(total)),
		fmt.Sprintf("backlog filled by SQL in %s before the instances started, due %s after; service defaults, --log-level error",
			filled.Round(100*time.Millisecond), scaleOutLead),
		fmt.Sprintf("%d-byte payloads; duplicates counted by message id at the application's consumer", DefaultPayload))
	return r, nil
}

// fillBacklog inserts size timeouts for dest, all due at one instant scaleOutLead after the
// insert ends, each id a message UUID, and returns that instant.
func (s *scale) fillBacklog(ctx context.Context, run, dest string, size int) (time.Time, error) {
	md := persistence.EncodeMetadata(map[string]string{HeaderRun: run})
	// Far ahead while inserting, moved to its instant after: an instance polling the store
	// meanwhile (none should) would find nothing due.
	if _, err := s.db.ExecContext(ctx, `INSERT INTO `+s.table+` (id, destination, due, available_at, owner, payload, metadata, failure_count)
SELECT $1 || '-' || g, $2, now() + interval '1 day', now() + interval '1 day', '', $3, $4, 0
FROM generate_series(1, $5::int) AS g`, run, dest, payload(DefaultPayload), md, size); err != nil {
		return time.Time{}, fmt.Errorf("filling the backlog: %w", err)
	}
	due := time.Now().Add(scaleOutLead).Truncate(time.Millisecond)
	if _, err := s.db.ExecContext(ctx, `UPDATE `+s.table+` SET due = $1, available_at = $1`, due); err != nil {
		return time.Time{}, fmt.Errorf("filling the backlog: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `VACUUM (ANALYZE) `+s.table); err != nil {
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
	*service
	name    string
	metrics string
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
	cmd := exec.Command(s.env.Timeoutmill, "run",
		"--endpoint", s.endpoint, "--store", s.env.PostgresDSN, "--transport", s.env.AMQPURL,
		"--error-queue", s.errorQueue(), "--instance", name, "--metrics-addr", addr, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", s.env.Timeoutmill, err)
	}
	svc := &service{cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() {
		svc.done <- cmd.Wait()
		_ = logFile.Close()
	}()
	return &instance{service: svc, name: name, metrics: "http://" + addr}, nil
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
		case err := <-in.done:
			return fmt.Errorf("instance %s exited (%v); see %s", in.name, err, in.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dispatched reads how many messages the instance forwarded from its metrics.
func (in *instance) dispatched() (int, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(in.metrics + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("reading the metrics of %s: %w", in.name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, dispatchedMetric+"{") && !strings.HasPrefix(line, dispatchedMetric+" ") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("reading the metrics of %s: %q: %w", in.name, line, err)
		}
		return int(v), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading the metrics of %s: %w", in.name, err)
	}
	return 0, fmt.Errorf("the metrics of %s have no %s", in.name, dispatchedMetric)
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
