// Package stopcycles is the graceful-stop test every transport runs: an endpoint is stopped and
// started again many times, each stop landing in a burst of due timeouts, and the deliveries are
// checked for loss, lease-long delays, early arrivals, critical errors and error-queue messages.
package stopcycles

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
type Recorder struct {
	mu        sync.Mutex
	delivered map[string][]time.Time
	errored   []string
	critical  []*timeouts.CriticalError
}

// Delivered records a message delivered to Destination.
func (r *Recorder) Delivered(msg *message.Message) {
	r.mu.Lock()
	r.delivered[msg.UUID] = append(r.delivered[msg.UUID], time.Now())
	r.mu.Unlock()
}

// ErrorQueue records a message that reached the error queue.
func (r *Recorder) ErrorQueue(msg *message.Message) {
	r.mu.Lock()
	r.errored = append(r.errored, msg.UUID)
	r.mu.Unlock()
}

// OnCriticalError is the manager's Config.OnCriticalError.
func (r *Recorder) OnCriticalError(_ context.Context, e *timeouts.CriticalError) {
	r.mu.Lock()
	r.critical = append(r.critical, e)
	r.mu.Unlock()
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
// a message on the error queue. Duplicates are allowed only for timeouts due before a stop,
// which may have been in flight at it.
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
	rec := &Recorder{delivered: map[string][]time.Time{}}
	due := map[string]time.Time{}
	var starts, stops, stopped []time.Time

	for cycle := 0; cycle <= cfg.Cycles; cycle++ {
		starts = append(starts, time.Now())
		p := cfg.Start(t, cycle, rec)
		if cycle == cfg.Cycles {
			waitForAll(t, rec, due, 2*time.Minute)
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

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.critical, "critical errors raised by stopped managers")
	require.Empty(t, rec.errored, "messages sent to the error queue by a stop")

	res := Result{Scheduled: len(due)}
	var late []string
	for id, at := range due {
		got := rec.delivered[id]
		require.NotEmpty(t, got, "timeout %s (due %s) lost", id, at.Format(time.RFC3339Nano))
		res.Delivered++
		sort.Slice(got, func(i, j int) bool { return got[i].Before(got[j]) })
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
			// Only a forward in flight at a stop may be delivered again after it.
			res.Duplicates += len(got) - 1
			require.True(t, stopBetween(stops, stopped, got[0], got[len(got)-1]), "timeout %s delivered twice with no stop between: %v", id, got)
		}
	}
	require.Empty(t, late, "timeouts that waited beyond a restart (the first 10)")
	t.Logf("%d timeouts over %d stops: %d delivered, %d duplicates, at most %s after they could be delivered",
		res.Scheduled, cfg.Cycles, res.Delivered, res.Duplicates, res.MaxLate.Round(time.Millisecond))
	return res
}

// stopBetween reports whether a stop, from its beginning to its end, overlaps first..last.
func stopBetween(stops, stopped []time.Time, first, last time.Time) bool {
	for i := range stops {
		if !stopped[i].Before(first) && !stops[i].After(last) {
			return true
		}
	}
	return false
}

// waitForAll waits until every scheduled timeout was delivered at least once, or within passes.
func waitForAll(t *testing.T, rec *Recorder, due map[string]time.Time, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		rec.mu.Lock()
		missing := 0
		for id := range due {
			if len(rec.delivered[id]) == 0 {
				missing++
			}
		}
		rec.mu.Unlock()
		if missing == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
