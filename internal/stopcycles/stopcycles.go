// Package stopcycles is the graceful-stop test every transport runs: an endpoint is stopped and
// started again many times, each stop landing in a burst of due timeouts, and the deliveries are
// checked for loss, lease-long delays, early arrivals, critical errors and error-queue messages.
package stopcycles

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
)

// Lease is the ClaimLease of the managers Start makes: longer than a run, so that a timeout a
// stop stranded in a claim is never delivered during it.
const Lease = 10 * time.Minute

// Destination is the topic the scheduled messages are delivered to, unless Config.Destination
// names another.
const Destination = "stopcycles.dest"

// Process is one run of the endpoint, as a process would run it: a manager on a router with a
// handler of the destination beside it.
type Process interface {
	// Publisher schedules delayed messages (the manager's Publisher).
	Publisher() message.Publisher
	// Stop stops the process the documented way: close the router, wait for the manager's
	// Done, then close the store and the Pub/Sub.
	Stop() error
	// Err is the manager's Err.
	Err() error
}

// RunRouter runs router, which manager was added to, and returns the process it makes: its Stop
// closes the router, waits for Run and the manager's Done, then calls closers in order (the
// store, then the Pub/Sub).
func RunRouter(manager *timeouts.Manager, router *message.Router, closers ...func() error) Process {
	p := &routerProcess{manager: manager, router: router, closers: closers, ran: make(chan error, 1)}
	go func() { p.ran <- router.Run(context.Background()) }()
	<-router.Running()
	return p
}

type routerProcess struct {
	manager *timeouts.Manager
	router  *message.Router
	closers []func() error
	ran     chan error
}

func (p *routerProcess) Publisher() message.Publisher { return p.manager.Publisher() }
func (p *routerProcess) Err() error                   { return p.manager.Err() }

func (p *routerProcess) Stop() error {
	if err := p.router.Close(); err != nil {
		return err
	}
	if err := <-p.ran; err != nil {
		return err
	}
	<-p.manager.Done()
	var errs []error
	for _, c := range p.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// Recorder is handed to Start: the process calls Delivered from its Destination handler and
// ErrorQueue for each message on the error queue; OnCriticalError goes in the manager's Config.
// Each process gets its own, so that every delivery is known by the process that made it.
type Recorder struct {
	process int
	run     *record
}

// record is what the processes of a run saw.
type record struct {
	mu        sync.Mutex
	delivered map[string][]delivery
	errored   []string
	critical  []*timeouts.CriticalError
}

// delivery is one delivery of a timeout: when, and by the handler of which process.
type delivery struct {
	at      time.Time
	process int
}

// Delivered records a message delivered to Destination.
func (r *Recorder) Delivered(msg *message.Message) {
	d := delivery{at: time.Now(), process: r.process}
	r.run.mu.Lock()
	r.run.delivered[msg.UUID] = append(r.run.delivered[msg.UUID], d)
	r.run.mu.Unlock()
}

// ErrorQueue records a message that reached the error queue.
func (r *Recorder) ErrorQueue(msg *message.Message) {
	r.run.mu.Lock()
	r.run.errored = append(r.run.errored, msg.UUID)
	r.run.mu.Unlock()
}

// OnCriticalError is the manager's Config.OnCriticalError.
func (r *Recorder) OnCriticalError(_ context.Context, e *timeouts.CriticalError) {
	r.run.mu.Lock()
	r.run.critical = append(r.run.critical, e)
	r.run.mu.Unlock()
}

// Configure sets what every manager of a run needs: the long ClaimLease (Lease), breakers short
// enough that one armed by a stop would trip while the run watches, and rec's critical-error
// hook.
func (r *Recorder) Configure(c timeouts.Config) timeouts.Config {
	c.ClaimLease = Lease
	c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = time.Second
	c.TimeToTriggerStoreCircuitBreaker = time.Second
	c.TimeToTriggerDispatchCircuitBreaker = time.Second
	c.OnCriticalError = r.OnCriticalError
	return c
}

// Config is one run of the test.
type Config struct {
	// Cycles is how many times the endpoint is stopped and started again. Defaults to 20.
	Cycles int
	// Burst is how many timeouts fall due within ±50 ms of each stop. Defaults to 200.
	Burst int
	// Spread is how many more fall due over each cycle. Defaults to 50.
	Spread int
	// CycleLength is how long each process runs before its stop. Defaults to 1 s.
	CycleLength time.Duration
	// LeaseBound is how long after it could be delivered (its due time, or the next start if it
	// fell due while no process ran) a timeout may arrive: the drain of the burst of each restart
	// on a busy machine. Defaults to 20 s, 60 s under the race detector. Start's managers set
	// ClaimLease to Lease, longer than the whole run: a timeout stranded by a claim is then never
	// delivered during the run, and fails it as lost. Run reports the worst lateness it saw.
	LeaseBound time.Duration
	// Quiet is how long every stopped process is watched for critical errors after the last
	// stop; set it beyond the breakers' TimeToTrigger* of the managers Start makes. Defaults to
	// 3 s.
	Quiet time.Duration
	// Destination is the topic the messages are scheduled for. Defaults to Destination.
	Destination string
	// Start starts process number cycle (0 to Cycles; the last one delivers what is left).
	Start func(t *testing.T, cycle int, rec *Recorder) Process
}

// Result is what a run saw.
type Result struct {
	Scheduled, Delivered, Duplicates int
	// MaxLate is the longest a timeout waited after it could be delivered.
	MaxLate time.Duration
}

// Run runs the cycles and fails t on a lost, early or lease-delayed timeout, a critical error or
// a message on the error queue. A timeout may be delivered again only after a stop that may have
// cut its forward short: by a later process, or by the same one once its stop has begun. One
// process delivering it twice while it runs fails t (see twiceBeforeStop).
func Run(t *testing.T, cfg Config) Result {
	t.Helper()
	if cfg.Cycles == 0 {
		cfg.Cycles = 20
	}
	if cfg.Burst == 0 {
		cfg.Burst = 200
	}
	if cfg.Spread == 0 {
		cfg.Spread = 50
	}
	if cfg.CycleLength == 0 {
		cfg.CycleLength = time.Second
	}
	if cfg.LeaseBound == 0 {
		cfg.LeaseBound = 20 * time.Second
		if raceEnabled {
			cfg.LeaseBound = time.Minute
		}
	}
	if cfg.Destination == "" {
		cfg.Destination = Destination
	}
	if cfg.Quiet == 0 {
		cfg.Quiet = 3 * time.Second
	}
	run := &record{delivered: map[string][]delivery{}}
	due := map[string]time.Time{}
	var starts, stops, stopped []time.Time
	var lastStop time.Time // when the stop of the last process began

	for cycle := 0; cycle <= cfg.Cycles; cycle++ {
		starts = append(starts, time.Now())
		p := cfg.Start(t, cycle, &Recorder{process: cycle, run: run})
		if cycle == cfg.Cycles {
			waitForAll(t, run, due, 2*time.Minute)
			lastStop = time.Now()
			require.NoError(t, p.Stop())
			require.NoError(t, p.Err(), "the last process raised a critical error")
			break
		}
		stopAt := time.Now().Add(cfg.CycleLength)
		var msgs []*message.Message
		for i := range cfg.Burst + cfg.Spread {
			at := stopAt.Add(time.Duration(i%101-50) * time.Millisecond) // within ±50 ms of the stop
			if i >= cfg.Burst {
				at = time.Now().Add(time.Duration(i-cfg.Burst) * cfg.CycleLength / time.Duration(cfg.Spread))
			}
			msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("cycle %d #%d", cycle, i)))
			timeouts.DeliverAt(msg, at)
			due[msg.UUID] = at
			msgs = append(msgs, msg)
		}
		for start := 0; start < len(msgs); start += 50 {
			require.NoError(t, p.Publisher().Publish(cfg.Destination, msgs[start:min(start+50, len(msgs))]...))
		}
		time.Sleep(time.Until(stopAt))
		stops = append(stops, time.Now())
		require.NoError(t, p.Stop(), "stop %d", cycle)
		stopped = append(stopped, time.Now())
		require.NoError(t, p.Err(), "process %d raised a critical error before its stop ended", cycle)
	}
	time.Sleep(time.Until(stops[len(stops)-1].Add(cfg.Quiet)))

	run.mu.Lock()
	defer run.mu.Unlock()
	require.Empty(t, run.critical, "critical errors raised by stopped managers")
	require.Empty(t, run.errored, "messages sent to the error queue by a stop")
	began := append(slices.Clone(stops), lastStop) // began[p]: when the stop of process p began

	res := Result{Scheduled: len(due)}
	var late []string
	for id, at := range due {
		deliveries := run.delivered[id]
		require.NotEmpty(t, deliveries, "timeout %s (due %s) lost", id, at.Format(time.RFC3339Nano))
		res.Delivered++
		sort.Slice(deliveries, func(i, j int) bool { return deliveries[i].at.Before(deliveries[j].at) })
		got := make([]time.Time, len(deliveries))
		for i, d := range deliveries {
			got[i] = d.at
		}
		require.False(t, got[0].Before(at), "timeout %s delivered %s early", id, at.Sub(got[0]))
		// It may wait for the next start, if it fell due while no process ran, but no longer.
		ready := at
		for i, stop := range stops {
			if !at.Before(stop) && at.Before(starts[i+1]) {
				ready = starts[i+1]
			}
		}
		res.MaxLate = max(res.MaxLate, got[0].Sub(ready))
		if got[0].Sub(ready) > cfg.LeaseBound && len(late) < 10 {
			late = append(late, fmt.Sprintf("%s %s after it could be delivered", id, got[0].Sub(ready)))
		}
		if len(got) > 1 {
			res.Duplicates += len(got) - 1
			if p := twiceBeforeStop(deliveries, began); p >= 0 {
				require.Failf(t, "a timeout delivered twice with no stop between",
					"timeout %s (due %s) delivered twice by process %d before its stop began: %s; %s",
					id, since(starts[0], at), p, describe(starts[0], deliveries), timeline(starts, began, stopped))
			}
		}
	}
	require.Empty(t, late, "timeouts that waited beyond a restart (the first 10)")
	t.Logf("%d timeouts over %d stops: %d delivered, %d duplicates, at most %s after they could be delivered",
		res.Scheduled, cfg.Cycles, res.Delivered, res.Duplicates, res.MaxLate.Round(time.Millisecond))
	return res
}

// twiceBeforeStop returns a process that delivered a timeout more than once before its stop
// began (began[p] is when the stop of process p began), or -1 if none did. Only a forward in flight
// at a stop may be delivered again: by a later process, after the stop gave the timeout back, or
// by the same process while it stops.
//
// Each delivery counts for the process whose handler made it, not for the one running when it was
// recorded. A stopped process may still record one after the next has started: Watermill's router
// starts a handler for a message its subscription handed over just as Close waited for the
// running handlers, and Close returns without waiting for that handler. Its forward was cut short
// by the stop, so the timeout was given back, and the next process delivers it too, maybe first.
func twiceBeforeStop(deliveries []delivery, began []time.Time) int {
	running := map[int]int{} // deliveries made by each process before its stop began
	for _, d := range deliveries {
		if d.at.Before(began[d.process]) {
			running[d.process]++
			if running[d.process] > 1 {
				return d.process
			}
		}
	}
	return -1
}

// since is t as an offset from the run's first start, for failure messages.
func since(start, t time.Time) string { return "+" + t.Sub(start).Round(time.Microsecond).String() }

// describe lists deliveries: when, as offsets from the run's first start, and by which process.
func describe(start time.Time, deliveries []delivery) string {
	out := make([]string, len(deliveries))
	for i, d := range deliveries {
		out[i] = fmt.Sprintf("%s by process %d", since(start, d.at), d.process)
	}
	return strings.Join(out, ", ")
}

// timeline is each process's start and stop, as offsets from the run's first start. began holds
// one more stop than stopped: the last process's, which ends the run.
func timeline(starts, began, stopped []time.Time) string {
	var b strings.Builder
	for i := range stopped {
		fmt.Fprintf(&b, "process %d: started %s, stop %s..%s; ", i, since(starts[0], starts[i]), since(starts[0], began[i]), since(starts[0], stopped[i]))
	}
	last := len(stopped)
	fmt.Fprintf(&b, "process %d: started %s, stop %s", last, since(starts[0], starts[last]), since(starts[0], began[last]))
	return b.String()
}

// waitForAll waits until every scheduled timeout was delivered at least once, or within passes.
func waitForAll(t *testing.T, run *record, due map[string]time.Time, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		run.mu.Lock()
		missing := 0
		for id := range due {
			if len(run.delivered[id]) == 0 {
				missing++
			}
		}
		run.mu.Unlock()
		if missing == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
