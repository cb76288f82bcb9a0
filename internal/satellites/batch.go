package satellites

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/connloss"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
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

// delayed is a message for the Timeouts queue and the timeout read from it.
type delayed struct {
	msg *message.Message
	t   persistence.Timeout
}

// store stores the timeouts of batch with one StoreMany: the one path of every delayed message,
// a lone message being a batch of one. If a batch of many fails, each is stored alone, so that
// an invalid timeout, an outage and the breaker are met message by message.
func (s *Store) store(batch []*request[delayed]) {
	first, again := firstOfEach(batch, func(x delayed) string { return x.t.ID })
	if len(again) > 0 {
		defer s.store(again) // they find their timeout stored
	}
	ts := make([]persistence.Timeout, len(first))
	for i, r := range first {
		ts[i] = r.item.t
	}
	// A store that started runs to its end even while the router shuts down (which cancels
	// message contexts): the Pub/Sub may count the message as handed over already.
	ctx, cancel := detached(first[0].item.msg)
	defer cancel()
	inserted, err := s.calls.StoreMany(ctx, ts)
	if err != nil && len(first) > 1 {
		s.logger.Debug("Storing a batch of timeouts failed; storing them one by one", watermill.LogFields{"count": len(ts), "error": err.Error()})
		eachAlone(first, s.store)
		return
	}
	if err != nil {
		r := first[0]
		if errors.Is(err, persistence.ErrInvalidTimeout) {
			r.finish(s.reject(r.item.msg, err.Error()))
			return
		}
		s.logger.Error("Storing timeout failed; will retry", err, watermill.LogFields{"timeout_id": r.item.t.ID})
		s.cfg.Breaker.Failure(ctx, err)
		r.finish(fmt.Errorf("storing timeout %s: %w", r.item.t.ID, err))
		return
	}
	s.cfg.Breaker.Success()
	isNew := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		isNew[id] = true
	}
	for _, r := range first {
		if isNew[r.item.t.ID] {
			s.logger.Debug("Timeout stored", watermill.LogFields{"timeout_id": r.item.t.ID, "destination": r.item.t.Destination, "due": r.item.t.Due})
			if s.cfg.OnStored != nil {
				s.cfg.OnStored(r.item.t.Due)
			}
			r.finish(nil)
			continue
		}
		r.finish(s.checkDuplicate(r.item.msg, r.item.t))
	}
}

// due is one id a dispatcher message announces, and the message.
type due struct {
	msg  *message.Message
	id   string
	many bool // the message carries other ids too
}

// key makes due keyed: the batcher never dispatches one id in two batches at once.
func (x due) key() string { return x.id }

// forward is one timeout of a batch on its way to its destination.
type forward struct {
	req *request[due]
	t   persistence.Timeout
	out *message.Message
}

// dispatch dispatches the timeouts of batch together: the one path of every dispatcher message,
// a lone message being a batch of one. The batcher never hands it an id another batch is
// dispatching (due is keyed, see batcher.exclusive). It looks them up with one PeekMany, then forwards them:
// with the Forwarder in one ForwardMany, otherwise with one Publish per destination and one
// RemoveMany. If a batch of many fails where failures are the timeout's own (a lookup, a
// Forwarder's commit, a Publish refused other than by the connection), each is dispatched alone
// through the same calls; a Publish that failed with the connection counts no attempt.
func (d *Dispatch) dispatch(batch []*request[due]) {
	first, again := firstOfEach(batch, func(x due) string { return x.id })
	if len(again) > 0 {
		defer d.dispatch(again) // they find their timeout gone
	}
	found, ok := d.lookUp(first)
	if !ok {
		eachAlone(first, d.dispatch)
		return
	}
	if len(found) == 0 {
		return
	}
	// Once started, forwards run to their end even while the router shuts down (which cancels
	// message contexts): cut short after the broker took a message, it would be sent again.
	ctx, cancel := detached(found[0].req.item.msg)
	defer cancel()
	for _, f := range found {
		f.out.SetContext(ctx)
	}
	if d.forwarder != nil {
		d.forwardMany(ctx, found)
		return
	}
	d.publishAndRemove(found)
}

// lookUp looks up the timeouts of first (one request per id) with one PeekMany, answers the
// requests whose timeout is gone, or unreadable, and returns the others. ok is false when the
// lookup of many failed: the caller dispatches each alone.
func (d *Dispatch) lookUp(first []*request[due]) (found []forward, ok bool) {
	ids := make([]string, len(first))
	for i, r := range first {
		ids[i] = r.item.id
	}
	ctx := messageContext(first[0].item.msg)
	ts, err := d.calls.PeekMany(ctx, ids)
	if err != nil && len(first) > 1 {
		d.logger.Debug("Looking up a batch of timeouts failed; dispatching them one by one", watermill.LogFields{"count": len(ids), "error": err.Error()})
		return nil, false
	}
	if err != nil {
		r := first[0]
		if errors.Is(err, persistence.ErrCorruptMetadata) {
			r.finish(d.unreadable(r.item, err))
			return nil, true
		}
		d.cfg.Breaker.Failure(ctx, err)
		r.finish(fmt.Errorf("looking up timeout %s: %w", r.item.id, err))
		return nil, true
	}
	now := d.cfg.Now()
	var notYet []*request[due]
	defer func() { d.notYetDue(ctx, notYet) }()
	byID := make(map[string]persistence.Timeout, len(ts))
	for _, t := range ts {
		byID[t.ID] = t
	}
	for _, r := range first {
		t, ok := byID[r.item.id]
		if !ok {
			d.logger.Debug("Timeout already dispatched or cancelled", watermill.LogFields{"timeout_id": r.item.id})
			r.finish(nil)
			continue
		}
		if t.Parked != "" {
			// Parked since it was announced (a redelivered announcement): it waits for an
			// operator, and is not forwarded.
			d.logger.Debug("Timeout parked; not forwarded", watermill.LogFields{"timeout_id": r.item.id})
			r.finish(nil)
			continue
		}
		if t.Due.After(now) {
			// Not due here: rescheduled to later after its claim's lease ran out, or claimed by a
			// poller whose clock runs ahead of this one's. Never early: it is given back, to be
			// claimed again when due.
			notYet = append(notYet, r)
			continue
		}
		out := message.NewMessage(t.ID, t.Payload)
		out.Metadata = withoutRoutingHeaders(t.Metadata, wireparse.IsRoutingHeader)
		out.Metadata.Set(wire.HeaderDue, wireparse.FormatExpire(t.Due))
		found = append(found, forward{req: r, t: t, out: out})
	}
	return found, true
}

// notYetDue acks the announcements of timeouts not due yet, after giving them back to the store
// so that they are claimable from their due time (a store without persistence.Releaser keeps
// them until their claim's lease runs out).
func (d *Dispatch) notYetDue(ctx context.Context, reqs []*request[due]) {
	if len(reqs) == 0 {
		return
	}
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.item.id
	}
	d.logger.Debug("Timeouts announced before their due time; given back", watermill.LogFields{"timeout_ids": ids})
	if rel, ok := d.cfg.Store.(persistence.Releaser); ok {
		if _, err := guarded(ctx, d.cfg.Breaker, func(ctx context.Context) (int, error) { return rel.Release(ctx, ids) }); err != nil {
			d.logger.Error("Giving back timeouts not due yet failed; they wait for their claim's lease", err, watermill.LogFields{"timeout_ids": ids})
		}
	}
	for _, r := range reqs {
		r.finish(nil)
	}
}

// publishAndRemove publishes the forwards, one Publish per destination, then removes the
// forwarded timeouts with one RemoveMany: at least once. A Publish of many that failed other than
// with the connection is tried again message by message.
func (d *Dispatch) publishAndRemove(found []forward) {
	byDestination := map[string][]forward{}
	var destinations []string
	for _, f := range found {
		if _, ok := byDestination[f.t.Destination]; !ok {
			destinations = append(destinations, f.t.Destination)
		}
		byDestination[f.t.Destination] = append(byDestination[f.t.Destination], f)
	}
	var (
		sent   []forward
		alone  []*request[due]
		failed sync.WaitGroup
	)
	for _, dest := range destinations {
		fs := byDestination[dest]
		msgs := make([]*message.Message, len(fs))
		for i, f := range fs {
			msgs[i] = f.out
		}
		if err := d.cfg.Publisher.Publish(dest, msgs...); err != nil {
			if len(fs) > 1 && !connloss.Is(err) && !d.stopping() {
				// The broker may have refused one message of them (one larger than it takes,
				// say): each is published again alone, so that the others are delivered and
				// only the refused one counts an attempt, or ends on the error queue or parked.
				// Those confirmed before the refusal are delivered twice: at least once.
				d.logger.Debug("Publishing a batch of due messages failed; publishing them one by one",
					watermill.LogFields{"count": len(fs), "destination": dest, "error": err.Error()})
				for _, f := range fs {
					alone = append(alone, f.req)
				}
				continue
			}
			// Each counts a failed attempt of its own, and waits out the breaker's delay on its
			// own, as it would alone.
			for _, f := range fs {
				failed.Add(1)
				go func() {
					defer failed.Done()
					f.req.finish(d.forwardFailed(f.req.item.msg, f.t, f.out, err))
				}()
			}
			continue
		}
		if d.interrupted() {
			for _, f := range fs {
				f.req.finish(d.cutShort(f.t, nil))
			}
			continue
		}
		for _, f := range fs {
			d.dispatched(f.t)
		}
		sent = append(sent, fs...)
	}
	d.removeMany(sent)
	for _, f := range sent {
		f.req.finish(nil)
	}
	eachAlone(alone, d.dispatch)
	failed.Wait()
}

// removeMany deletes forwarded timeouts in one call; if that fails, each is removed alone with
// remove's retries.
func (d *Dispatch) removeMany(sent []forward) {
	if len(sent) == 0 {
		return
	}
	ctx, cancel := detached(sent[0].req.item.msg)
	defer cancel()
	ids := make([]string, len(sent))
	for i, f := range sent {
		ids[i] = f.t.ID
	}
	removed, err := d.calls.RemoveMany(ctx, ids)
	if err != nil {
		if len(sent) > 1 {
			d.logger.Error("Removing a batch of dispatched timeouts failed; removing them one by one", err, watermill.LogFields{"count": len(ids)})
		}
		var wg sync.WaitGroup
		for _, f := range sent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.remove(f.req.item.msg, f.t.ID)
			}()
		}
		wg.Wait()
		return
	}
	if len(removed) == len(ids) {
		return
	}
	gone := make(map[string]bool, len(removed))
	for _, id := range removed {
		gone[id] = true
	}
	for _, id := range ids {
		if !gone[id] {
			d.logger.Info("Dispatched timeout was already gone: possible duplicate delivery", watermill.LogFields{"timeout_id": id})
		}
	}
}
