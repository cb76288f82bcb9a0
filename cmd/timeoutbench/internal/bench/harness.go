package bench

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// DefaultPayload is the size of the body of every message sent unless Plan.Payload says
// otherwise: 64 bytes, small as timeouts usually are.
const DefaultPayload = 64

// payload is the body of every message sent: n bytes of JSON (the watermill-sql peer keeps
// payloads in a JSON column), at least the 19 of its frame.
func payload(n int) []byte {
	frame := len(`{"timeoutbench":""}`)
	return []byte(`{"timeoutbench":"` + strings.Repeat("x", max(0, n-frame)) + `"}`)
}

// payload is the body of the plan's messages.
func (p Plan) payload() []byte { return payload(cmp.Or(p.Payload, DefaultPayload)) }

// linger is how long a run keeps counting after the last expected message arrived, so that
// duplicates close behind it are seen.
const linger = 300 * time.Millisecond

// workload runs on an open rig.
type workload struct {
	plan Plan
	sys  System
	rig  *Rig
	in   *inbox
	dest string
}

func (w workload) message(run string, seq int, due time.Time) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), w.plan.payload())
	msg.Metadata.Set(HeaderRun, run)
	msg.Metadata.Set(HeaderSeq, strconv.Itoa(seq))
	msg.Metadata.Set(HeaderDue, strconv.FormatInt(due.UnixNano(), 10))
	w.rig.Mark(msg, due)
	return msg
}

func (w workload) start(kind Kind, capacity int) *collector {
	c := newCollector(fmt.Sprintf("%s-%s", kind, watermill.NewShortUUID()), capacity)
	w.in.current.Store(c)
	return c
}

// precision sends a steady stream of single messages, each with a random delay, and measures
// their lateness.
func (w workload) precision(ctx context.Context) Result {
	r := Result{System: w.sys.Name, Kind: KindPrecision, Notes: append([]string(nil), w.rig.Notes...)}
	total := int(float64(w.plan.PrecisionRate) * w.plan.PrecisionDuration.Seconds())
	c := w.start(KindPrecision, total)

	jobs := make(chan *message.Message, total)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		failed    int
		firstErr  error
		lastDue   time.Time
		published int
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range jobs {
				err := w.rig.Publish(w.dest, msg)
				mu.Lock()
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					published++
				}
				mu.Unlock()
			}
		}()
	}
	spread := w.plan.MaxDelay - w.plan.MinDelay
	start := time.Now()
	ticker := time.NewTicker(10 * time.Millisecond)
	sent := 0
	for sent < total && ctx.Err() == nil {
		<-ticker.C
		target := min(total, int(time.Since(start).Seconds()*float64(w.plan.PrecisionRate)))
		for ; sent < target; sent++ {
			due := time.Now().Add(w.plan.MinDelay + time.Duration(rand.Int64N(int64(spread))))
			if due.After(lastDue) {
				lastDue = due
			}
			jobs <- w.message(c.run, sent, due)
		}
	}
	ticker.Stop()
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)

	r.Messages = sent
	r.PublishRate = float64(published) / elapsed.Seconds()
	if failed > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d publish errors, first: %v", failed, firstErr))
	}
	c.expect(sent)
	w.finish(ctx, c, &r, lastDue.Add(w.plan.Grace))
	return r
}

// backlog sends n messages due at one instant, far enough ahead for the system to store them
// all first, and measures how fast they drain once due.
func (w workload) backlog(ctx context.Context, n int) Result {
	r := Result{System: w.sys.Name, Kind: KindBacklog, Messages: n, Notes: append([]string(nil), w.rig.Notes...)}

	// How long storing n takes decides the due time: measured on a pilot where the system can
	// tell what it holds, guessed where it holds a message once Publish returned.
	storeRate, base, err := w.pilot(ctx, max(200, n/10))
	if err != nil {
		r.NotRun = "pilot: " + err.Error()
		return r
	}
	margin := 2*time.Second + time.Duration(1.3*float64(n)/storeRate*float64(time.Second))
	// A whole second: the peer keeps due times in whole seconds, and would otherwise deliver the
	// whole backlog early.
	due := time.Now().Add(margin).Truncate(time.Second).Add(time.Second)
	c := w.start(KindBacklog, n)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = w.message(c.run, i, due)
	}

	start := time.Now()
	failed, err := publishChunks(msgs, 8, 100, func(ms []*message.Message) error { return w.rig.Publish(w.dest, ms...) })
	published := time.Since(start)
	r.PublishRate = float64(n-failed) / published.Seconds()
	if failed > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d publish errors, first: %v", failed, err))
	}
	c.expect(n - failed)

	if w.rig.Pending != nil {
		storedAt, ok := w.waitStored(ctx, base+n-failed, due.Add(w.plan.Grace))
		took := storedAt.Sub(start)
		switch {
		case !ok:
			r.Notes = append(r.Notes, "not all stored before the grace period ran out")
		case storedAt.After(due):
			r.Notes = append(r.Notes, fmt.Sprintf("stored in %s (%s/s), %s after due: drain includes storing",
				took.Round(time.Millisecond), rate(float64(n)/took.Seconds()), storedAt.Sub(due).Round(time.Millisecond)))
		default:
			r.Notes = append(r.Notes, fmt.Sprintf("stored in %s (%s/s)", took.Round(time.Millisecond), rate(float64(n)/took.Seconds())))
		}
	} else if time.Now().After(due) {
		r.Notes = append(r.Notes, "published only after due: drain includes publishing")
	}

	// Wait as long as draining n at 200 a second takes, slower than any mechanism here drains,
	// and then the grace.
	w.finish(ctx, c, &r, due.Add(w.plan.Grace+time.Duration(float64(n)/200*float64(time.Second))))
	t := c.tally()
	if t.unique > 0 && t.last.After(due) {
		r.DrainRate = float64(t.unique) / t.last.Sub(due).Seconds()
		r.Figures = map[string]float64{"drain": r.DrainRate}
	}
	if t.lateness != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("first %s ms after due", millis(t.lateness.Min)))
	}
	return r
}

// pilot measures how fast the system takes k messages, the way the backlog will send them. Where
// it can tell what it holds, they are due in an hour (dropped with the rig, never delivered) and
// the rate is that of storing them; otherwise they are due at once (delivered and ignored) and the
// rate is that of publishing them. It returns the rate and how many the system then holds.
func (w workload) pilot(ctx context.Context, k int) (storeRate float64, holding int, err error) {
	due := time.Now()
	before := 0
	if w.rig.Pending != nil {
		if before, err = w.rig.Pending(ctx); err != nil {
			return 0, 0, err
		}
		due = due.Add(time.Hour)
	}
	msgs := make([]*message.Message, k)
	for i := range msgs {
		msgs[i] = w.message("pilot", i, due)
	}
	start := time.Now()
	if _, err := publishChunks(msgs, 8, 100, func(ms []*message.Message) error { return w.rig.Publish(w.dest, ms...) }); err != nil {
		return 0, 0, err
	}
	if w.rig.Pending == nil {
		return float64(k) / time.Since(start).Seconds(), 0, nil
	}
	at, ok := w.waitStored(ctx, before+k, start.Add(2*time.Minute))
	if !ok {
		return 0, 0, fmt.Errorf("%d messages not stored within 2 minutes", k)
	}
	return float64(k) / at.Sub(start).Seconds(), before + k, nil
}

// waitStored polls until the rig holds n messages or deadline.
// Counting is a scan of the store's table (SQLite's Stats reads every row), so the polls thin out
// as the wait goes on, to a twentieth of the time waited, between 10 and 200 ms: fine enough to
// time a short wait, and not a load on the store that is being measured.
func (w workload) waitStored(ctx context.Context, n int, deadline time.Time) (time.Time, bool) {
	start := time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		pending, err := w.rig.Pending(ctx)
		if err == nil && pending >= n {
			return time.Now(), true
		}
		time.Sleep(min(200*time.Millisecond, max(10*time.Millisecond, time.Since(start)/20)))
	}
	return time.Time{}, false
}

// finish waits for every message until deadline and fills in what arrived.
func (w workload) finish(ctx context.Context, c *collector, r *Result, deadline time.Time) {
	if c.wait(ctx, deadline) {
		time.Sleep(linger)
	}
	w.in.current.Store(nil)
	t := c.tally()
	r.Counted = true
	r.Lateness = t.lateness
	r.Early = t.early
	r.Duplicated = t.dups
	c.mu.Lock()
	r.Lost = max(0, c.expected-t.unique)
	c.mu.Unlock()
}
