// Package batcher gathers the items that concurrent callers hand in at the same time into batches.
// It has no goroutine of its own: a caller leads a batch, then hands the turn on. The satellites
// use it to store and dispatch many messages with one store call.
package batcher

import (
	"fmt"
	"sync"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Config configures a Batcher. Zero values take the defaults.
type Config struct {
	// Max bounds the items of one batch. Defaults to 1: every batch is a batch of one.
	Max int
	// MaxBatchers bounds the batches handled at once. Defaults to 1.
	MaxBatchers int
	// MinParallel is how many waiting items start a further batch beside running ones. Fewer wait
	// for a running batch to finish. Defaults to 1.
	MinParallel int
}

// withDefaults fills in the zero values.
func (c Config) withDefaults() Config {
	c.Max = max(c.Max, 1)
	c.MaxBatchers = max(c.MaxBatchers, 1)
	c.MinParallel = max(c.MinParallel, 1)
	return c
}

// Validate reports the first impossible setting.
func (c Config) Validate() error {
	switch {
	case c.Max < 0:
		return fmt.Errorf("%w: batcher Max must not be negative, got %d", ErrInvalidConfig, c.Max)
	case c.MaxBatchers < 0:
		return fmt.Errorf("%w: batcher MaxBatchers must not be negative, got %d", ErrInvalidConfig, c.MaxBatchers)
	case c.MinParallel < 0:
		return fmt.Errorf("%w: batcher MinParallel must not be negative, got %d", ErrInvalidConfig, c.MinParallel)
	}
	return nil
}

// Request is one item waiting for its batch. For a satellite it is a message, or one id of a
// dispatcher message that carries many.
type Request[T any] struct {
	Item    T
	index   int           // the item's place among those of its Do call
	results chan<- result // shared by the items of one Do call
	lead    chan struct{} // shared by the items of one Do call: told to handle the queue's next batch
	told    bool          // lead was sent for this item; guarded by the batcher's mu
}

// result is one item's outcome.
type result struct {
	index int
	err   error
}

// Finish answers the request: Do returns err for its item. Each request must be answered once.
func (r *Request[T]) Finish(err error) { r.results <- result{index: r.index, err: err} }

// Keyed is an item that no two batches may handle at the same time as another item with its key.
type Keyed interface{ Key() string }

// Batcher gathers the items handed in at the same time into batches. A caller that finds fewer than
// MaxBatchers batches running handles the queue itself. When done, it hands the turn to a waiting
// caller. So batches form while the previous one waits on the store or the broker, and a lone item
// is handled at once.
type Batcher[T any] struct {
	cfg    Config
	handle func(batch []*Request[T])

	mu      sync.Mutex
	queue   []*Request[T] // waiting from queue[head] on
	head    int
	running int

	busy busyKeys // the keys the running batches handle, for exclusive
}

// New returns a Batcher that hands each batch it forms to handle. handle must Finish every request
// of its batch. Batches of Keyed items go through exclusive (see there).
func New[T any](cfg Config, handle func(batch []*Request[T])) (*Batcher[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Batcher[T]{cfg: cfg.withDefaults(), handle: handle}, nil
}

// busyKeys are the keys that running batches are handling. Each has a channel, closed when its
// batch is done with it.
type busyKeys struct {
	mu   sync.Mutex
	keys map[string]chan struct{}
}

// handleBatch handles a batch the batcher formed: with exclusive when its items are Keyed.
func (b *Batcher[T]) handleBatch(batch []*Request[T]) {
	if _, ok := any(batch[0].Item).(Keyed); ok {
		b.exclusive(batch, func(x T) string { return any(x).(Keyed).Key() }, b.handle)
		return
	}
	b.handle(batch)
}

// exclusive handles batch with handle, never beside another batch that holds the same key. A
// request whose key another batch holds waits until that batch is done with it. Then it is handled
// (a dispatch then finds its timeout gone). So two announcements of one id that arrive together are
// never forwarded side by side. handle must not wait for another batch of b, nor call exclusive. It
// may call itself: a batch's own retries hold its keys already.
func (b *Batcher[T]) exclusive(batch []*Request[T], key func(T) string, handle func(batch []*Request[T])) {
	for len(batch) > 0 {
		var free, held []*Request[T]
		var wait []chan struct{}
		mine := make(chan struct{})
		var taken []string
		b.busy.mu.Lock()
		if b.busy.keys == nil {
			b.busy.keys = map[string]chan struct{}{}
		}
		for _, r := range batch {
			k := key(r.Item)
			if ch, ok := b.busy.keys[k]; ok {
				held = append(held, r)
				wait = append(wait, ch)
				continue
			}
			b.busy.keys[k] = mine
			taken = append(taken, k)
			free = append(free, r)
		}
		b.busy.mu.Unlock()
		func() {
			defer func() {
				b.busy.mu.Lock()
				for _, k := range taken {
					delete(b.busy.keys, k)
				}
				b.busy.mu.Unlock()
				close(mine)
			}()
			if len(free) > 0 {
				handle(free)
			}
		}()
		for _, ch := range wait {
			<-ch
		}
		batch = held
	}
}

// Do handles items with whatever else is waiting, and returns their results in their order. The
// items of one call join the queue together, so they share a batch as far as Max allows. Several
// batches start at once when enough items wait.
func (b *Batcher[T]) Do(items ...T) []error {
	results := make(chan result, len(items))
	lead := make(chan struct{}, len(items))
	b.mu.Lock()
	for i, item := range items {
		b.queue = append(b.queue, &Request[T]{Item: item, index: i, results: results, lead: lead})
	}
	// One caller leads when none is running. Another leads for each further MinParallel waiting
	// items, up to MaxBatchers.
	starts, waiting := 0, len(b.queue)-b.head
	if b.running == 0 {
		starts, waiting = 1, waiting-min(waiting, b.cfg.Max)
	}
	for b.running+starts < b.cfg.MaxBatchers && waiting >= b.cfg.MinParallel {
		starts, waiting = starts+1, waiting-min(waiting, b.cfg.Max)
	}
	b.running += starts
	b.mu.Unlock()
	// A call with one item leads on its own goroutine: it has nothing else to attend to. A call
	// with many leads on new goroutines, so that it answers each telling at once.
	lead1 := b.lead
	if len(items) > 1 {
		lead1 = func() { go b.lead() }
	}
	for range starts {
		lead1()
	}
	errs := make([]error, len(items))
	for left := len(items); left > 0; {
		select {
		case r := <-results:
			errs[r.index] = r.err
			left--
		case <-lead:
			lead1()
		}
	}
	// An item is told to lead only while it waits, before its result. A telling that came with the
	// last results must still be followed, or the queue would wait for nobody.
	for {
		select {
		case <-lead:
			lead1()
		default:
			return errs
		}
	}
}

// lead handles the next batch, then hands the turn to a waiting caller or gives it up.
func (b *Batcher[T]) lead() {
	b.mu.Lock()
	n := min(len(b.queue)-b.head, b.cfg.Max)
	if n == 0 {
		b.running--
		b.mu.Unlock()
		return
	}
	batch := append([]*Request[T](nil), b.queue[b.head:b.head+n]...)
	clear(b.queue[b.head : b.head+n])
	b.head += n
	switch {
	case b.head == len(b.queue):
		b.queue, b.head = b.queue[:0], 0
	case b.head > len(b.queue)/2:
		// Keep appending from reallocating the whole backlog each time.
		left := copy(b.queue, b.queue[b.head:])
		clear(b.queue[left:])
		b.queue, b.head = b.queue[:left], 0
	}
	b.mu.Unlock()

	b.handleBatch(batch)

	b.mu.Lock()
	defer b.mu.Unlock()
	// Only an item still in the queue is told to lead, and only once. It leaves the queue under
	// this lock, so an answered Do call is never told.
	for _, r := range b.queue[b.head:] {
		if !r.told {
			r.told = true
			r.lead <- struct{}{}
			return
		}
	}
	b.running--
}

// FirstOfEach splits batch into the first request for each key and the later ones. A redelivered
// message may meet its first delivery in one batch: it must not be handled twice.
func FirstOfEach[T any](batch []*Request[T], key func(T) string) (first, again []*Request[T]) {
	seen := make(map[string]bool, len(batch))
	for _, r := range batch {
		k := key(r.Item)
		if seen[k] {
			again = append(again, r)
			continue
		}
		seen[k] = true
		first = append(first, r)
	}
	return first, again
}

// EachAlone handles each request as a batch of its own, all at the same time. A satellite retries a
// failed batch this way, through the same calls. So one bad timeout touches no other, and each
// failure waits out its breaker's delay on its own.
func EachAlone[T any](reqs []*Request[T], handle func(batch []*Request[T])) {
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Go(func() { handle([]*Request[T]{r}) })
	}
	wg.Wait()
}
