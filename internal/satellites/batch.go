package satellites

import (
	"cmp"
	"sync"
)

// DefaultMaxBatch is the default of DispatchConfig.MaxBatch and StoreConfig.MaxBatch.
const DefaultMaxBatch = 256

// maxBatchers bounds the batches a satellite handles at once: while one waits on the store or the
// broker, the next gathers the messages that arrived meanwhile. In the store satellite a second
// batch starts only for minParallelBatch waiting messages; fewer wait for the running batch,
// which takes no longer than a small batch would, so that small batches do not multiply commits.
// The dispatch satellite starts a batch for any waiting id (dispatchParallelBatch): a due message
// held behind a running batch's confirms and removal is late by their length (make bench's
// precision rows measured it), while a backlog's many-id messages form full batches either way.
// On a broker the dispatch satellite's batches spend most of their time waiting for the confirms
// of their forwards, so several wait side by side (make bench's backlog on RabbitMQ + PostgreSQL
// measures the choice).
const (
	maxBatchers           = 8
	minParallelBatch      = 16
	dispatchParallelBatch = 1
)

// MaxUnremoved is the most due ids a dispatch satellite whose DispatchConfig.MaxBatch is maxBatch
// (0: DefaultMaxBatch) can have forwarded and not yet removed at one moment: that many batches
// side by side, each forwarded whole before its ids are removed together. A process killed at
// the worst moment forwards these again after its restart (at least once); this is their bound.
func MaxUnremoved(maxBatch int) int {
	if maxBatch == 0 {
		maxBatch = DefaultMaxBatch
	}
	return maxBatchers * maxBatch
}

// request is one item waiting for its batch: a message, or one id of a dispatcher message that
// carries many.
type request[T any] struct {
	item    T
	index   int           // the item's place among those of its do call
	results chan<- result // shared by the items of one do call
	lead    chan struct{} // shared by the items of one do call: told to handle the queue's next batch
	told    bool          // lead was sent for this item; guarded by the batcher's mu
}

// result is one item's outcome: nil acks it.
type result struct {
	index int
	err   error
}

// finish answers the request. Each request is answered once.
func (r *request[T]) finish(err error) { r.results <- result{index: r.index, err: err} }

// batcher gathers the items a satellite handles at the same time into batches, without a
// goroutine of its own: a handler that finds fewer than maxBatchers batches running handles the
// queue itself, and hands on to a waiting handler when it is done, so batches form while the
// previous one waits on the store or the broker, and a lone message is handled at once.
type batcher[T any] struct {
	max    int
	handle func(batch []*request[T])
	// minParallel waiting items start a further batch beside running ones; 0 means
	// minParallelBatch.
	minParallel int

	mu      sync.Mutex
	queue   []*request[T] // waiting from queue[head] on
	head    int
	running int

	busy busyKeys // the keys the running batches handle, for exclusive
}

// busyKeys are the keys batches running side by side are handling, each with a channel closed
// when its batch is done with it.
type busyKeys struct {
	mu   sync.Mutex
	keys map[string]chan struct{}
}

// keyed is an item that must not be handled by two batches at the same time when another item
// has its key.
type keyed interface{ key() string }

// handleBatch handles a batch the batcher formed: with exclusive when its items are keyed.
func (b *batcher[T]) handleBatch(batch []*request[T]) {
	if _, ok := any(batch[0].item).(keyed); ok {
		b.exclusive(batch, func(x T) string { return any(x).(keyed).key() }, b.handle)
		return
	}
	b.handle(batch)
}

// exclusive handles batch with handle, never at the same time as another exclusive call of b
// handles a request with the same key: a request whose key another batch holds waits for that
// batch to be done with it, then is handled (a dispatch then finds its timeout gone). Two
// announcements of one id that arrive together (a redelivery, or an id announced again after a
// restart gave its claim back) are thus never forwarded side by side. handle must not itself wait
// for another batch of b, nor call exclusive (it may call itself: a batch's own retries, alone or
// in part, hold its keys already).
func (b *batcher[T]) exclusive(batch []*request[T], key func(T) string, handle func(batch []*request[T])) {
	for len(batch) > 0 {
		var free, held []*request[T]
		var wait []chan struct{}
		mine := make(chan struct{})
		var taken []string
		b.busy.mu.Lock()
		if b.busy.keys == nil {
			b.busy.keys = map[string]chan struct{}{}
		}
		for _, r := range batch {
			k := key(r.item)
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

// do handles items with whatever else is waiting, and returns their results in their order.
// The items of one call (the ids of one dispatcher message) join the queue together, so they
// are batched together as far as max allows; several batches start at once when there are
// enough of them.
func (b *batcher[T]) do(items ...T) []error {
	results := make(chan result, len(items))
	lead := make(chan struct{}, len(items))
	b.mu.Lock()
	for i, item := range items {
		b.queue = append(b.queue, &request[T]{item: item, index: i, results: results, lead: lead})
	}
	// One handler leads when none is running; another for each further minParallel waiting
	// beyond what those running batches take, up to maxBatchers.
	minParallel := cmp.Or(b.minParallel, minParallelBatch)
	starts, waiting := 0, len(b.queue)-b.head
	if b.running == 0 {
		starts, waiting = 1, waiting-min(waiting, b.max)
	}
	for b.running+starts < maxBatchers && waiting >= minParallel {
		starts, waiting = starts+1, waiting-min(waiting, b.max)
	}
	b.running += starts
	b.mu.Unlock()
	// A call with one item leads on its own goroutine: told to lead only while its item waits, it
	// has nothing else to attend to. A call with many leads on goroutines of their own, so that
	// it follows at once each telling meant for an item of its still in the queue.
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
	// An item is told to lead only while it waits in the queue, before its result: a telling
	// that came with the last results is still to be followed, or the queue would wait for
	// nobody.
	for {
		select {
		case <-lead:
			lead1()
		default:
			return errs
		}
	}
}

// lead handles the next batch, then hands the turn to a waiting handler or gives it up.
func (b *batcher[T]) lead() {
	b.mu.Lock()
	n := min(len(b.queue)-b.head, b.max)
	if n == 0 {
		b.running--
		b.mu.Unlock()
		return
	}
	batch := append([]*request[T](nil), b.queue[b.head:b.head+n]...)
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
	// Only an item still in the queue is told to lead, once; it leaves the queue under this
	// lock, so the do call of one that has been answered is never told.
	for _, r := range b.queue[b.head:] {
		if !r.told {
			r.told = true
			r.lead <- struct{}{}
			return
		}
	}
	b.running--
}

// firstOfEach splits batch into the first request for each key and the later ones: a redelivered
// message may meet its first delivery in one batch, and must not be handled twice in it.
func firstOfEach[T any](batch []*request[T], key func(T) string) (first, again []*request[T]) {
	seen := make(map[string]bool, len(batch))
	for _, r := range batch {
		k := key(r.item)
		if seen[k] {
			again = append(again, r)
			continue
		}
		seen[k] = true
		first = append(first, r)
	}
	return first, again
}

// eachAlone handles each request as a batch of its own, all at the same time: what failed for a
// batch is tried again message by message, through the same calls, so that one bad timeout
// touches no other and each failure waits out its breaker's delay on its own, side by side.
func eachAlone[T any](reqs []*request[T], handle func(batch []*request[T])) {
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handle([]*request[T]{r})
		}()
	}
	wg.Wait()
}
