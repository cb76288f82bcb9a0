package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Headers the benchmark puts on every message it sends. The mechanisms under test carry them
// through untouched, as they carry any header.
const (
	// HeaderDue is the intended due time, Unix nanoseconds: lateness is measured against it, not
	// against whatever (rounded) time a mechanism keeps.
	HeaderDue = "timeoutbench.due"
	// HeaderRun names the workload run a message belongs to.
	HeaderRun = "timeoutbench.run"
	// HeaderSeq numbers the messages of a run from 0.
	HeaderSeq = "timeoutbench.seq"
)

// collector records the arrivals of one workload run.
type collector struct {
	run string

	mu       sync.Mutex
	arrivals []time.Duration // lateness by seq
	arrived  []bool
	unique   int
	dups     int
	early    int
	last     time.Time
	expected int // -1 until known
	all      chan struct{}
	closed   bool
}

func newCollector(run string, capacity int) *collector {
	return &collector{
		run:      run,
		arrivals: make([]time.Duration, 0, capacity),
		expected: -1,
		all:      make(chan struct{}),
	}
}

// expect tells the collector how many messages were sent; all closes once each arrived.
func (c *collector) expect(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expected = n
	c.checkAll()
}

func (c *collector) checkAll() {
	if !c.closed && c.expected >= 0 && c.unique >= c.expected {
		c.closed = true
		close(c.all)
	}
}

// record counts one arrival at at of the message numbered seq, due at due.
func (c *collector) record(seq int, due, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.arrived) <= seq {
		c.arrived = append(c.arrived, false)
		c.arrivals = append(c.arrivals, 0)
	}
	if c.arrived[seq] {
		c.dups++
		return
	}
	c.arrived[seq] = true
	late := at.Sub(due)
	c.arrivals[seq] = late
	if late < 0 {
		c.early++
	}
	c.unique++
	if at.After(c.last) {
		c.last = at
	}
	c.checkAll()
}

// tally is what a collector saw.
type tally struct {
	unique, dups, early int
	last                time.Time
	lateness            *Lateness
}

func (c *collector) tally() tally {
	c.mu.Lock()
	defer c.mu.Unlock()
	samples := make([]time.Duration, 0, c.unique)
	for i, ok := range c.arrived {
		if ok {
			samples = append(samples, c.arrivals[i])
		}
	}
	return tally{unique: c.unique, dups: c.dups, early: c.early, last: c.last, lateness: newLateness(samples)}
}

// wait returns when every expected message arrived (true) or at deadline (false).
func (c *collector) wait(ctx context.Context, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-c.all:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// inbox hands the messages arriving at a destination to the collector of the current run.
type inbox struct {
	current atomic.Pointer[collector]
	stray   atomic.Int64 // messages of no current run (a previous run's late duplicates)
	done    chan struct{}
}

// receive consumes msgs until the channel closes, acking each message as it is counted.
func receive(msgs <-chan *message.Message) *inbox {
	in := &inbox{done: make(chan struct{})}
	go func() {
		defer close(in.done)
		for msg := range msgs {
			at := time.Now()
			in.take(msg, at)
			msg.Ack()
		}
	}()
	return in
}

func (in *inbox) take(msg *message.Message, at time.Time) {
	c := in.current.Load()
	if c == nil || msg.Metadata.Get(HeaderRun) != c.run {
		in.stray.Add(1)
		return
	}
	seq, err1 := strconv.Atoi(msg.Metadata.Get(HeaderSeq))
	due, err2 := strconv.ParseInt(msg.Metadata.Get(HeaderDue), 10, 64)
	if err1 != nil || err2 != nil || seq < 0 {
		in.stray.Add(1)
		return
	}
	c.record(seq, time.Unix(0, due), at)
}
