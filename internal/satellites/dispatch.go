package satellites

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/timeoutmill/timeoutmill/satellites"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/batcher"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/connloss"
	"github.com/timeoutmill/timeoutmill/internal/errorqueue"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// DispatchConfig configures the dispatch satellite.
type DispatchConfig struct {
	// Endpoint whose TimeoutsDispatcher queue the satellite consumes. Required.
	Endpoint string
	// Store holds the timeouts. Required.
	Store persistence.Store
	// Publisher delivers due messages to their destinations. Required.
	Publisher message.Publisher
	// ErrorQueue receives the timeouts that could not be forwarded. It also receives malformed
	// dispatcher messages. Required.
	ErrorQueue *errorqueue.Queue
	// Breaker watches storage and forwarding failures (TimeToTriggerDispatchCircuitBreaker).
	// Required.
	Breaker *breaker.CircuitBreaker
	// NumberOfRetries is how often a failed forward is retried before the error queue. 0 means one
	// attempt in all. A forward that failed with the connection is not an attempt (see
	// connectionLost).
	NumberOfRetries int
	// RecoveryBreaker counts failures to record a failed forward
	// (MaximumRecoveryFailuresPerSecond). Optional.
	RecoveryBreaker *breaker.RateBreaker
	// Forwarder, when set, delivers each due message and removes its timeout in one step. That is
	// exactly once where the transport shares the store's database. Defaults to publishing with
	// Publisher, then removing from Store (at least once).
	Forwarder satellites.Forwarder
	// OnDispatched is told of each timeout delivered and when. Optional (metrics use it).
	OnDispatched func(t persistence.Timeout, deliveredAt time.Time)
	// OnParked is told of each timeout parked (see persistence.Parker). Its forward and its
	// error-queue copy were both refused. Optional (metrics use it).
	OnParked func(t persistence.Timeout)
	// OnRepublishedAlone is told how many due messages are published again one by one after
	// the publish of their batch was refused. Optional (metrics use it).
	OnRepublishedAlone func(n int)
	// OnBatch is told the size of each batch of due timeouts forwarded together, once they are
	// looked up and before they are forwarded. Optional (metrics use it).
	OnBatch func(n int)
	// Stopping reports whether the endpoint's stop has begun. Optional. A forward that fails then
	// is the stop's doing: it counts no attempt. It never sends the message to the error queue. It
	// nacks the dispatcher message and leaves the timeout in the store.
	Stopping func() bool
	// Interrupted reports whether a publish without error may not have reached its subscriber.
	// Watermill's GoChannel does so once its stop has begun: it discards what it holds when it
	// closes. Such a forward is not counted as delivered: its timeout is kept and its message
	// nacked. That is a possible duplicate rather than a loss. Optional.
	Interrupted func() bool
	// MaxBatch bounds the due timeouts dispatched together. Batches form when several dispatcher
	// messages are handled at once (several consumers). Defaults to DefaultMaxBatch; 1 makes every
	// batch a batch of one. A Forwarder that is not a BatchForwarder forwards a batch one timeout
	// at a time.
	MaxBatch int
	// Now reads the store's clock, never ahead of it (see internal/storeclock). It decides when a
	// held announcement's ids are looked up, and whether a timeout is due. So nothing is forwarded
	// early by the store's clock. Defaults to time.Now.
	Now func() time.Time
}

// Validate reports the first missing or impossible setting.
func (c DispatchConfig) Validate() error {
	if err := wireparse.ValidateName("endpoint", c.Endpoint); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: dispatch satellite needs a Store", ErrInvalidConfig)
	case c.Publisher == nil:
		return fmt.Errorf("%w: dispatch satellite needs a Publisher", ErrInvalidConfig)
	case c.ErrorQueue == nil:
		return fmt.Errorf("%w: dispatch satellite needs an ErrorQueue", ErrInvalidConfig)
	case c.Breaker == nil:
		return fmt.Errorf("%w: dispatch satellite needs a Breaker", ErrInvalidConfig)
	case c.NumberOfRetries < 0:
		return fmt.Errorf("%w: NumberOfRetries must not be negative, got %d", ErrInvalidConfig, c.NumberOfRetries)
	case c.MaxBatch < 0:
		return fmt.Errorf("%w: MaxBatch must not be negative, got %d", ErrInvalidConfig, c.MaxBatch)
	}
	return nil
}

// Dispatch is the satellite on an endpoint's TimeoutsDispatcher queue. For each due id it looks the
// timeout up, forwards its message, then removes it. The message goes unchanged: same UUID, payload
// and headers, less the routing headers. Delivery is at least once: a crash between forward and
// remove forwards it again.
type Dispatch struct {
	cfg       DispatchConfig
	queue     string
	logger    watermill.LoggerAdapter
	calls     persistence.BatchStore    // the store's batch calls, or their fallback
	forwarder satellites.BatchForwarder // Config.Forwarder, forwarding many at once; nil: publish
	batcher   *batcher.Batcher[due]
	// recording holds a token per call that records a failed forward in the store. Many forwards
	// failing at once then queue here, not for the store's connections inside their deadline.
	recording chan struct{}
	// suspects counts, per timeout id, the forwards in a row that the broker did not confirm in
	// time (see unconfirmedAgain). A confirmed forward clears its id.
	suspectsMu sync.Mutex
	suspects   map[string]suspect
	// confirmations counts the forwards the broker confirmed.
	confirmations atomic.Uint64
}

// suspect is a timeout whose forwards went unconfirmed: how many in a row, and the
// confirmations counted when the first of them did.
type suspect struct {
	unconfirmed int
	since       uint64
}

var _ Satellite = (*Dispatch)(nil)

// NewDispatch returns the dispatch satellite.
func NewDispatch(cfg DispatchConfig, logger watermill.LoggerAdapter) (*Dispatch, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	queue := wire.DispatcherQueue(cfg.Endpoint)
	cfg.Publisher = GuardedPublisher{Publisher: cfg.Publisher, Breaker: cfg.Breaker, Timeout: confirmWait(cfg.Breaker)}
	d := &Dispatch{cfg: cfg, queue: queue, logger: loggerOrNop(logger).With(watermill.LogFields{"queue": queue}),
		calls: guardedCalls{batchCalls(cfg.Store), cfg.Breaker}, recording: make(chan struct{}, maxRecording),
		suspects: map[string]suspect{}}
	if cfg.Forwarder != nil {
		if fwd, ok := cfg.Forwarder.(satellites.BatchForwarder); ok {
			d.forwarder = fwd
		} else {
			d.forwarder = forwardEach{cfg.Forwarder}
		}
	}
	var err error
	d.batcher, err = batcher.New(batcher.Config{Max: cfg.MaxBatch, MaxBatchers: maxBatchers, MinParallel: dispatchParallelBatch}, d.dispatch)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// confirmWait is how long a forward's publish waits for the broker's confirms. A confirm that
// comes late is not a failure: the message was delivered. Given up on, it is published again, a
// duplicate, and the overloaded broker gets more work. So a forward waits as long as the dispatch
// breaker lets the stage go without a success (its TimeToWait), not one CallTimeout. The forward's
// own context still bounds it (afterForwardTimeout).
func confirmWait(b *breaker.CircuitBreaker) time.Duration {
	return max(b.CallTimeout(), min(b.TimeToWait(), afterForwardTimeout))
}

// maxRecording bounds the store calls that record failed forwards at once, per satellite.
const maxRecording = 4

// maxAlone bounds the forwards of a refused batch that are dispatched again alone at once.
const maxAlone = 16

// maxUnconfirmed is how many forwards of one timeout in a row may go unconfirmed, while the
// broker confirms others, before the message itself is suspected, not the broker's load: a
// message of many megabytes on a link too slow to confirm it within the wait, say. Its batch is
// then published alone, and alone it counts an attempt, on the way to the error queue. So no
// message is retried forever. A broker that confirms nothing trips the dispatch breaker instead.
const maxUnconfirmed = 3

// maxSuspects bounds the ids counted in suspects. Past it the counts start over: that many
// messages unconfirmed at once is the broker's load, not one message.
const maxSuspects = 4096

// Name is the router handler's name.
func (d *Dispatch) Name() string { return d.queue }

// Queue is the endpoint's TimeoutsDispatcher queue.
func (d *Dispatch) Queue() string { return d.queue }

// maxHold bounds how long Handle waits for an announcement's due time
// (dispatcherqueue.HeaderDispatchAt). A poller announces a few tens of milliseconds ahead. The ids
// of a message that says a later time are looked up at once. Those not due go back to the store
// (never early).
const maxHold = time.Second

// Handle dispatches the timeouts whose ids msg carries. They share batches with the ids of other
// messages handled at the same time. A message that says when its ids are due
// (dispatcherqueue.HeaderDispatchAt) is held until then, up to maxHold. So the store is read at the
// due time, and a Cancel until then still wins. Handle acks msg (returns nil) once every id is
// forwarded, known gone, on the error queue or parked. Otherwise it nacks msg. The redelivery skips
// the ids already dispatched: they are gone by then.
func (d *Dispatch) Handle(msg *message.Message) error {
	ids, err := dispatcherqueue.Decode(msg)
	var dueBy time.Time
	if err == nil {
		dueBy, _, err = dispatcherqueue.DueBy(msg)
	}
	if err != nil {
		return d.cfg.ErrorQueue.Send(msg, errorqueue.Failure{Reason: err.Error(), Queue: d.queue, Handler: d.Name()})
	}
	if err := hold(msg.Context(), d.cfg.Now, dueBy); err != nil {
		return err
	}
	items := make([]due, len(ids))
	for i, id := range ids {
		items[i] = due{msg: msg, id: id, many: len(ids) > 1}
	}
	errs := d.batcher.Do(items...)
	if len(errs) == 1 {
		return errs[0]
	}
	var first error
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed == 0 {
		return nil
	}
	return fmt.Errorf("%d of the %d due ids of the message not dispatched yet: %w", failed, len(ids), first)
}

// hold waits until now, the store's clock, reaches dueBy. dueBy is the time a dispatcher message
// says its ids are due by. It waits only when that is at most maxHold away; the zero time means not
// at all. When ctx, the message's, ends first (the router is stopping), it returns an error: a
// nack. The ids are still claimed. The announcement is handed out again (a durable queue), or the
// ids are given back at the stop (GoChannel).
func hold(ctx context.Context, now func() time.Time, dueBy time.Time) error {
	if dueBy.IsZero() {
		return nil
	}
	// The timer runs on the monotonic clock. now is read again when it fires: the store's clock may
	// have been measured anew.
	for {
		wait := dueBy.Sub(now())
		if wait <= 0 || wait > maxHold {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("stopped %s before the announced ids were due: %w", wait.Round(time.Millisecond), ctx.Err())
		}
	}
}

// due is one id a dispatcher message announces, and the message.
type due struct {
	msg  *message.Message
	id   string
	many bool // the message carries other ids too
}

// Key makes due batcher.Keyed: the batcher never dispatches one id in two batches at once.
func (x due) Key() string { return x.id }

// forward is one timeout of a batch on its way to its destination.
type forward struct {
	req *batcher.Request[due]
	t   persistence.Timeout
	out *message.Message
}

// dispatch dispatches the timeouts of batch together. It is the one path of every dispatcher
// message: a lone message is a batch of one. The batcher never hands it an id that another batch
// holds (due is batcher.Keyed). It looks them up with one PeekMany, then forwards them. With a
// Forwarder that is one ForwardMany. Otherwise it is one Publish per destination and one
// RemoveMany. If a batch of many fails for a timeout's own sake, each is dispatched alone through
// the same calls. Such failures are a lookup, a Forwarder's commit, a Publish refused other than by
// the connection. A Publish that failed with the connection counts no attempt.
func (d *Dispatch) dispatch(batch []*batcher.Request[due]) {
	first, again := batcher.FirstOfEach(batch, func(x due) string { return x.id })
	if len(again) > 0 {
		defer d.dispatch(again) // they find their timeout gone
	}
	found, ok := d.lookUp(first)
	if !ok {
		batcher.EachAlone(first, d.dispatch)
		return
	}
	if len(found) == 0 {
		return
	}
	if d.cfg.OnBatch != nil {
		d.cfg.OnBatch(len(found))
	}
	// Once started, forwards run to their end, even while the router shuts down. Cut short after
	// the broker took a message, it would be sent again.
	ctx, cancel := detached(found[0].req.Item.msg)
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

// lookUp looks up the timeouts of first (one request per id) with one PeekMany. It answers the
// requests whose timeout is gone or unreadable, and returns the others. ok is false when the lookup
// of many failed: the caller dispatches each alone.
func (d *Dispatch) lookUp(first []*batcher.Request[due]) (found []forward, ok bool) {
	ids := make([]string, len(first))
	for i, r := range first {
		ids[i] = r.Item.id
	}
	ctx := messageContext(first[0].Item.msg)
	ts, err := d.calls.PeekMany(ctx, ids)
	if err != nil && len(first) > 1 {
		d.logger.Debug("Looking up a batch of timeouts failed; dispatching them one by one", watermill.LogFields{"count": len(ids), "error": err.Error()})
		return nil, false
	}
	if err != nil {
		r := first[0]
		if errors.Is(err, persistence.ErrCorruptMetadata) {
			r.Finish(d.unreadable(r.Item, err))
			return nil, true
		}
		d.cfg.Breaker.Failure(ctx, err)
		r.Finish(fmt.Errorf("looking up timeout %s: %w", r.Item.id, err))
		return nil, true
	}
	now := d.cfg.Now()
	var notYet []*batcher.Request[due]
	defer func() { d.notYetDue(ctx, notYet) }()
	byID := make(map[string]persistence.Timeout, len(ts))
	for _, t := range ts {
		byID[t.ID] = t
	}
	for _, r := range first {
		t, ok := byID[r.Item.id]
		if !ok {
			d.logger.Debug("Timeout already dispatched or cancelled", watermill.LogFields{"timeout_id": r.Item.id})
			r.Finish(nil)
			continue
		}
		if t.Parked != "" {
			// Parked since it was announced (a redelivered announcement). It waits for an operator,
			// and is not forwarded.
			d.logger.Debug("Timeout parked; not forwarded", watermill.LogFields{"timeout_id": r.Item.id})
			r.Finish(nil)
			continue
		}
		if t.Due.After(now) {
			// Not due here: rescheduled after its claim's lease ran out, or claimed by a poller
			// whose clock runs ahead of this one's. Never early: it is given back, to be claimed
			// again when due.
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

// notYetDue acks the announcements of timeouts not due yet. First it gives them back to the store,
// claimable from their due time. A store without persistence.Releaser keeps them until their
// claim's lease runs out.
func (d *Dispatch) notYetDue(ctx context.Context, reqs []*batcher.Request[due]) {
	if len(reqs) == 0 {
		return
	}
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.Item.id
	}
	d.logger.Debug("Timeouts announced before their due time; given back", watermill.LogFields{"timeout_ids": ids})
	if rel, ok := d.cfg.Store.(persistence.Releaser); ok {
		if _, err := guarded(ctx, d.cfg.Breaker, func(ctx context.Context) (int, error) { return rel.Release(ctx, ids) }); err != nil {
			d.logger.Error("Giving back timeouts not due yet failed; they wait for their claim's lease", err, watermill.LogFields{"timeout_ids": ids})
		}
	}
	for _, r := range reqs {
		r.Finish(nil)
	}
}

// publishAndRemove publishes the forwards, one Publish per destination. Then it removes the
// forwarded timeouts with one RemoveMany: at least once. A Publish of many that failed other than
// with the connection is tried again one by one.
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
		alone  []*batcher.Request[due]
		failed sync.WaitGroup
	)
	for _, dest := range destinations {
		fs := byDestination[dest]
		msgs := make([]*message.Message, len(fs))
		for i, f := range fs {
			msgs[i] = f.out
		}
		if err := d.cfg.Publisher.Publish(dest, msgs...); err != nil {
			if d.unconfirmed(err) {
				switch {
				case !d.unconfirmedAgain(fs):
					failed.Add(1)
					go func() {
						defer failed.Done()
						d.slowBroker(fs, dest, err)
					}()
				case len(fs) > 1:
					// One of them has gone unconfirmed too often: each goes alone, so that the
					// others are confirmed and only that one counts its attempts.
					d.logger.Info("A due message has not been confirmed in time too often; publishing its batch one by one",
						watermill.LogFields{"count": len(fs), "destination": dest, "error": err.Error()})
					if d.cfg.OnRepublishedAlone != nil {
						d.cfg.OnRepublishedAlone(len(fs))
					}
					for _, f := range fs {
						alone = append(alone, f.req)
					}
				default:
					f := fs[0]
					d.forget(f.t.ID)
					failed.Add(1)
					go func() {
						defer failed.Done()
						f.req.Finish(d.forwardFailed(f.req.Item.msg, f.t, f.out,
							fmt.Errorf("not confirmed in time %d times in a row: %w", maxUnconfirmed, err)))
					}()
				}
				continue
			}
			if len(fs) > 1 && !connloss.Is(err) && !d.stopping() {
				// The broker may have refused one of them (one larger than it takes, say). Each is
				// published again alone: the others get delivered, and only the refused one counts
				// an attempt, or ends on the error queue or parked. Those confirmed before the
				// refusal are delivered twice: at least once.
				d.logger.Debug("Publishing a batch of due messages failed; publishing them one by one",
					watermill.LogFields{"count": len(fs), "destination": dest, "error": err.Error()})
				if d.cfg.OnRepublishedAlone != nil {
					d.cfg.OnRepublishedAlone(len(fs))
				}
				for _, f := range fs {
					alone = append(alone, f.req)
				}
				continue
			}
			// Each counts a failed attempt of its own. Each waits out the breaker's delay on its
			// own, as it would alone.
			for _, f := range fs {
				failed.Add(1)
				go func() {
					defer failed.Done()
					f.req.Finish(d.forwardFailed(f.req.Item.msg, f.t, f.out, err))
				}()
			}
			continue
		}
		if d.interrupted() {
			for _, f := range fs {
				f.req.Finish(d.cutShort(f.t, nil))
			}
			continue
		}
		for _, f := range fs {
			d.confirmed(f.t.ID)
			d.dispatched(f.t)
		}
		sent = append(sent, fs...)
	}
	d.removeMany(sent)
	for _, f := range sent {
		f.req.Finish(nil)
	}
	d.eachAlone(alone)
	failed.Wait()
}

// eachAlone dispatches each request as a batch of one, at most maxAlone at once. A refused batch
// of many then costs the store and the broker a few calls at a time, not one per message at once.
func (d *Dispatch) eachAlone(reqs []*batcher.Request[due]) {
	tokens := make(chan struct{}, maxAlone)
	var wg sync.WaitGroup
	for _, r := range reqs {
		tokens <- struct{}{}
		wg.Go(func() {
			defer func() { <-tokens }()
			d.dispatch([]*batcher.Request[due]{r})
		})
	}
	wg.Wait()
}

// unconfirmedAgain counts one more unconfirmed forward of each of fs, and reports whether one
// of them has now gone unconfirmed maxUnconfirmed times in a row while the broker confirmed
// other forwards.
func (d *Dispatch) unconfirmedAgain(fs []forward) bool {
	d.suspectsMu.Lock()
	defer d.suspectsMu.Unlock()
	if len(d.suspects)+len(fs) > maxSuspects {
		clear(d.suspects)
	}
	confirmations := d.confirmations.Load()
	found := false
	for _, f := range fs {
		s, ok := d.suspects[f.t.ID]
		if !ok {
			s.since = confirmations
		}
		s.unconfirmed++
		d.suspects[f.t.ID] = s
		found = found || (s.unconfirmed >= maxUnconfirmed && confirmations > s.since)
	}
	return found
}

// confirmed counts a confirmed forward and forgets the unconfirmed ones of timeout id.
func (d *Dispatch) confirmed(id string) {
	d.confirmations.Add(1)
	d.suspectsMu.Lock()
	delete(d.suspects, id)
	d.suspectsMu.Unlock()
}

// forget forgets the unconfirmed forwards of timeout id, which counts an attempt now.
func (d *Dispatch) forget(id string) {
	d.suspectsMu.Lock()
	delete(d.suspects, id)
	d.suspectsMu.Unlock()
}

// unconfirmed reports whether a publish failed only because its deadline passed before the
// broker confirmed it. The broker is slow or out of reach; no message is at fault. Each may even
// have been delivered.
func (d *Dispatch) unconfirmed(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && !connloss.Is(err) && !d.stopping()
}

// slowBroker answers forwards whose publish was not confirmed in time (see unconfirmed). As with
// a lost connection, no attempt is counted, nothing goes to the error queue, and nothing is
// published again alone. Those would add work to an overloaded broker and its store, and turn
// slowness into failures. (Until one message has gone unconfirmed maxUnconfirmed times in a
// row: see unconfirmedAgain.) The breaker paces the retry (its RetryDelay), once for all of them,
// and trips only if the stage has no success for its wait. The dispatcher messages are nacked.
// A message whose confirm merely came late is delivered twice: at least once.
func (d *Dispatch) slowBroker(fs []forward, dest string, cause error) {
	d.logger.Info("Forwarding due messages was not confirmed in time; not counted as attempts, retried",
		watermill.LogFields{"count": len(fs), "destination": dest, "error": cause.Error()})
	ctx, cancel := detached(fs[0].req.Item.msg)
	defer cancel()
	d.cfg.Breaker.Failure(ctx, cause)
	for _, f := range fs {
		f.req.Finish(fmt.Errorf("forwarding timeout %s to %s (not confirmed in time, not counted as an attempt): %w", f.t.ID, dest, cause))
	}
}

// removeMany deletes forwarded timeouts in one call. If that fails, each is removed alone, with
// remove's retries.
func (d *Dispatch) removeMany(sent []forward) {
	if len(sent) == 0 {
		return
	}
	ctx, cancel := detached(sent[0].req.Item.msg)
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
		// A few at a time: a store too slow for the batch is not sent one call per timeout at once.
		tokens := make(chan struct{}, maxAlone)
		var wg sync.WaitGroup
		for _, f := range sent {
			tokens <- struct{}{}
			wg.Go(func() {
				defer func() { <-tokens }()
				d.remove(f.req.Item.msg, f.t.ID)
			})
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

func (d *Dispatch) stopping() bool    { return d.cfg.Stopping != nil && d.cfg.Stopping() }
func (d *Dispatch) interrupted() bool { return d.cfg.Interrupted != nil && d.cfg.Interrupted() }

// cutShort answers a forward that the endpoint's stop cut short. The timeout stays in the store,
// uncounted, for the next start (see DispatchConfig.Stopping).
func (d *Dispatch) cutShort(t persistence.Timeout, cause error) error {
	d.logger.Debug("Forward cut short by the stop; the timeout is kept", watermill.LogFields{"timeout_id": t.ID})
	return stopErr("forwarding timeout "+t.ID, cause)
}

// stopErr is the error for work the stop cut short. It nacks the message. It wraps
// context.Canceled, which the router does not log as a handler failure.
func stopErr(what string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%s cut short by the endpoint's stop: %w", what, context.Canceled)
	}
	return fmt.Errorf("%s cut short by the endpoint's stop (%v): %w", what, cause, context.Canceled)
}

func (d *Dispatch) dispatched(t persistence.Timeout) {
	if d.cfg.OnDispatched != nil {
		d.cfg.OnDispatched(t, d.cfg.Now())
	}
	d.cfg.Breaker.Success()
}

// forwardFailed counts a failed attempt. Past NumberOfRetries the message goes to the error queue
// and leaves the store. Otherwise the dispatcher message is nacked and the attempt repeated.
func (d *Dispatch) forwardFailed(msg *message.Message, t persistence.Timeout, out *message.Message, cause error) error {
	if d.stopping() {
		return d.cutShort(t, cause)
	}
	ctx, cancel := detached(msg)
	defer cancel()
	if connloss.Is(cause) {
		return d.connectionLost(ctx, t, cause)
	}
	fields := watermill.LogFields{"timeout_id": t.ID, "destination": t.Destination}
	d.logger.Error("Forwarding due message failed", cause, fields)
	found, err := d.recordFailure(ctx, t.ID)
	if err != nil {
		// Neither lost nor moved on: the attempt was not counted. So the message is nacked and
		// tried again. Failing this way too often is a critical error of its own.
		if d.cfg.RecoveryBreaker != nil {
			d.cfg.RecoveryBreaker.Failure(err)
		}
		d.cfg.Breaker.Failure(ctx, err)
		return fmt.Errorf("recording failed forward of timeout %s (%v): %w", t.ID, cause, err)
	}
	if !found {
		return nil // removed or cancelled meanwhile
	}
	attempts := t.FailureCount + 1
	if attempts <= d.cfg.NumberOfRetries {
		d.cfg.Breaker.Failure(ctx, cause)
		return fmt.Errorf("forwarding timeout %s to %s (attempt %d of %d): %w", t.ID, t.Destination, attempts, d.cfg.NumberOfRetries+1, cause)
	}
	out.Metadata.Set(wire.HeaderDestination, t.Destination)
	out.Metadata.Set(wire.HeaderExpire, wireparse.FormatExpire(t.Due))
	if t.Owner != "" {
		out.Metadata.Set(wire.HeaderOwner, t.Owner)
	}
	reason := fmt.Sprintf("forwarding to %q failed after %s: %v", t.Destination, plural(attempts, "attempt"), cause)
	if err := d.cfg.ErrorQueue.Send(out, errorqueue.Failure{Reason: reason, Queue: d.queue, Handler: d.Name(), Attempts: attempts}); err != nil {
		if parker, ok := d.cfg.Store.(persistence.Parker); ok && d.parkable(err) {
			return d.park(ctx, parker, t, attempts, cause, err)
		}
		// The broker is likely down for both: retry at the breaker's pace, not at once.
		d.cfg.Breaker.Failure(ctx, err)
		return err
	}
	// Handled: the retries counted before must not trip the breaker. The endpoint may have nothing
	// else to forward.
	d.cfg.Breaker.Success()
	d.remove(msg, t.ID)
	return nil
}

// recordFailure counts a failed attempt of timeout id in the store. It waits for one of the
// maxRecording tokens first; the call's deadline starts once it has one.
func (d *Dispatch) recordFailure(ctx context.Context, id string) (bool, error) {
	select {
	case d.recording <- struct{}{}:
	case <-ctx.Done():
		return false, fmt.Errorf("waiting to record a failed forward: %w", ctx.Err())
	}
	defer func() { <-d.recording }()
	return guarded(ctx, d.cfg.Breaker, func(ctx context.Context) (bool, error) {
		return d.cfg.Store.IncrementFailureCount(ctx, id)
	})
}

// parkable reports whether a refused error-queue copy says the message itself cannot go. The road
// being out is not such a refusal: not the connection's failure, not a context's (a cancellation or
// a deadline is transient, and retried), and not during the endpoint's stop.
func (d *Dispatch) parkable(err error) bool {
	return !connloss.Is(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !d.stopping()
}

// park sets aside a timeout whose forward and error-queue copy were both refused. Say its message
// is larger than the broker takes. Retried, it would fail the same way until the dispatch breaker
// stopped the endpoint. Parked, it stays in the store with the reason, never claimed until an
// operator unparks it. Its announcement is acked, and the breaker hears of no failure. If parking
// fails, the message is nacked and retried at the breaker's pace. That counts as a failure, as
// before parking existed.
func (d *Dispatch) park(ctx context.Context, parker persistence.Parker, t persistence.Timeout, attempts int, cause, sendErr error) error {
	reason := fmt.Sprintf("forwarding to %q failed after %s: %v; the error queue %q refused its copy too: %v",
		t.Destination, plural(attempts, "attempt"), cause, d.cfg.ErrorQueue.Topic(), sendErr)
	found, err := guarded(ctx, d.cfg.Breaker, func(ctx context.Context) (bool, error) { return parker.Park(ctx, t.ID, reason) })
	if err != nil {
		d.logger.Error("Parking an unforwardable timeout failed; will retry", err, watermill.LogFields{"timeout_id": t.ID})
		d.cfg.Breaker.Failure(ctx, err)
		return fmt.Errorf("parking timeout %s (%s): %w", t.ID, reason, err)
	}
	if !found {
		return nil // removed or cancelled meanwhile
	}
	d.logger.Error("Timeout parked: neither its destination nor the error queue accepts its message", errors.New(reason),
		watermill.LogFields{"timeout_id": t.ID, "destination": t.Destination, "attempts": attempts})
	if d.cfg.OnParked != nil {
		d.cfg.OnParked(t)
	}
	// The timeout is dealt with: the failed attempts that led here must not trip the breaker. The
	// endpoint may have nothing else to deliver.
	d.cfg.Breaker.Success()
	return nil
}

// unreadable handles a timeout the store holds but cannot read back: its stored headers are
// corrupt. Every attempt would fail the same way, so it is not retried forever. A dispatcher
// message with its id alone goes to the error queue, with the reason. That is the message itself
// when it carries only that id. The timeout leaves the store; an operator can still find the row by
// that id in a backup. The other ids of a message that carries many are dispatched as usual.
func (d *Dispatch) unreadable(x due, cause error) error {
	reason := fmt.Sprintf("timeout %s cannot be read from the store and was removed from it: %v", x.id, cause)
	d.logger.Error("Stored timeout is unreadable; moving its id to the error queue", cause,
		watermill.LogFields{"timeout_id": x.id, "error_queue": d.cfg.ErrorQueue.Topic()})
	poison := x.msg
	if x.many {
		poison = dispatcherqueue.Encode(x.id)
		poison.SetContext(x.msg.Context())
	}
	if err := d.cfg.ErrorQueue.Send(poison, errorqueue.Failure{Reason: reason, Queue: d.queue, Handler: d.Name(), Attempts: 1}); err != nil {
		return err
	}
	d.remove(x.msg, x.id)
	return nil
}

// afterForwardTimeout bounds the store calls that follow a forward attempt. They record a failure
// or remove the timeout. They run to the end even when a shutdown cancels the message's context.
// The forward already happened, or failed, and the store must learn of it.
const afterForwardTimeout = 30 * time.Second

// remove deletes a forwarded timeout. It may not fail the dispatcher message. The message is
// delivered, and a redelivery would forward it again at once. If the store keeps failing, the
// timeout stays claimed. It is forwarded once more when its lease runs out: the at-least-once
// duplicate.
func (d *Dispatch) remove(msg *message.Message, id string) {
	// The message is out: removing its timeout must finish, even while the router shuts down.
	// Otherwise it would be delivered again after the restart.
	ctx, cancel := detached(msg)
	defer cancel()
	fields := watermill.LogFields{"timeout_id": id}
	for {
		removed, err := d.calls.RemoveMany(ctx, []string{id})
		switch {
		case err == nil && len(removed) == 0:
			d.logger.Info("Dispatched timeout was already gone: possible duplicate delivery", fields)
			return
		case err == nil:
			return
		case ctx.Err() != nil:
			d.logger.Error("Removing dispatched timeout failed; it will be delivered again when its claim expires", err, fields)
			return
		}
		// Paced, but not counted against the dispatch breaker. Its wait is as long as these
		// retries, so a store refusing only deletes would stop the endpoint. A real outage trips
		// the fetch breaker through the poller.
		select {
		case <-ctx.Done():
		case <-time.After(removeRetryDelay):
		}
	}
}

// removeRetryDelay paces remove's retries.
const removeRetryDelay = time.Second

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
