package timeouts

import (
	"context"
	"sync"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/satellites"
)

// claimWindow counts the ids a poller claimed that the dispatch satellite of its instance has not
// handled since. The poller claims only while the count is under its window. All instances of an
// endpoint share the dispatcher queue, so the ids an instance handles are any instance's. In a
// drain each handles about its share, and the count stays near what waits on the queue for it.
//
// Without it a backlog moved onto the queue as fast as the pollers could claim it. Ids that waited
// there longer than their lease were claimed and announced again by another poller: work that
// slowed the drain further, and duplicates when two instances forwarded one id at once. With it
// the backlog waits in the store, where it is not leased.
//
// A batch claimed longer than expiry ago no longer counts. Its ids were handled by other
// instances, or are stuck, and neither must hold this poller up.
type claimWindow struct {
	mu      sync.Mutex
	batches []claimedBatch // oldest first
	held    int            // the sum of batches' n
	freed   chan struct{}  // a token when ids were handled
}

type claimedBatch struct {
	n  int
	at time.Time
}

// windowIDs is how many ids a poller may have claimed and not seen handled: twice what its
// dispatch satellite works on at once, and at least a few claims, so that it never waits for the
// next claim while the queue holds less than it can take.
func windowIDs(batch int) int { return max(4*batch, 2*satellites.MaxUnremoved(0)) }

func newClaimWindow() *claimWindow { return &claimWindow{freed: make(chan struct{}, 1)} }

// claimed records n ids claimed at at.
func (w *claimWindow) claimed(n int, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batches = append(w.batches, claimedBatch{n: n, at: at})
	w.held += n
}

// handled records n ids the instance's dispatch satellite handled, taken off the oldest batches.
func (w *claimWindow) handled(n int) {
	w.mu.Lock()
	for n > 0 && len(w.batches) > 0 {
		b := &w.batches[0]
		k := min(n, b.n)
		b.n -= k
		w.held -= k
		n -= k
		if b.n == 0 {
			w.batches = w.batches[1:]
		}
	}
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// reset forgets every claimed batch: the instance gave its claims back.
func (w *claimWindow) reset() {
	w.mu.Lock()
	w.batches, w.held = nil, 0
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// await waits until fewer than limit ids claimed within expiry before now are unhandled. It
// returns false when ctx ends first.
func (w *claimWindow) await(ctx context.Context, now func() time.Time, limit int, expiry time.Duration) bool {
	for {
		w.mu.Lock()
		t := now()
		for len(w.batches) > 0 && !w.batches[0].at.Add(expiry).After(t) {
			w.held -= w.batches[0].n
			w.batches = w.batches[1:]
		}
		if w.held < limit {
			w.mu.Unlock()
			return true
		}
		wait := w.batches[0].at.Add(expiry).Sub(t)
		w.mu.Unlock()
		timer := time.NewTimer(wait)
		select {
		case <-w.freed:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return false
		}
		timer.Stop()
	}
}
