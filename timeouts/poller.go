package timeouts

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/internal/announce"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/storeclock"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// poller claims due timeouts and announces their ids on the dispatcher queue. It claims
// everything due and not leased. It keeps no watermark, so a timeout committed late is never
// missed (NServiceBus#3500). After a full batch it claims again at once, while that batch is
// still being announced. So backlogs drain at full speed. Otherwise it sleeps until the next due
// time or PollInterval, whichever is sooner. wake wakes it early for a newly stored, earlier
// timeout. It wakes a little before that time and claims what is due at it. So the claim is done
// when the time comes. It announces those ids a lead before the due time. The announcement says
// when they are due (dispatcherqueue.HeaderDispatchAt). The dispatch satellite holds it until
// then and reads the store at the due time. So the announcement's trip is off the path from due
// to delivery. Nothing is delivered early.
//
// Every time the poller reads is on the store's clock (clock). It measures its offset once per
// poll. That is before the claim when the last measurement is older than freshClock, after it
// otherwise. So the measurement is off the path from due to delivery while the poller is busy.
type poller struct {
	store      persistence.Store
	clock      *storeclock.Clock
	announcer  *announce.Publisher
	interval   time.Duration
	batch      int
	lease      time.Duration
	claimAs    string                  // the instance recorded on claims (persistence.Claimer); "" for none
	retryDelay time.Duration           // the breakers' RetryDelay: how long dispatch.Failure waits
	fetch      *breaker.CircuitBreaker // storage failures
	dispatch   *breaker.CircuitBreaker // dispatcher queue failures
	stop       *lifecycle
	logger     watermill.LoggerAdapter
	// lead is how long before their due time claimed ids are announced: announceLead on a
	// broker, 0 on an in-process GoChannel.
	lead time.Duration
	// onClaimed is told how many ids each claim took, none included. Optional (metrics use it).
	onClaimed func(n int)

	wakeCh chan struct{}
	// slots holds a token per batch claimed and not yet announced. Claiming waits for a free one.
	// So the poller claims the next batch while the previous one is being announced. It is never
	// more than maxAnnouncing batches ahead of the dispatcher queue.
	slots      chan struct{}
	announcing sync.WaitGroup
	// plannedWake is when the sleeping poller will look again, in Unix nanoseconds. It is 0 while
	// the poller is working. Then any store must wake it: the Next it read may predate that store.
	plannedWake atomic.Int64
	// orphans is set when a claim failed. The database may have committed it and the answer been
	// lost on the way (a network that drops packets, a call past its deadline). Then ids are
	// claimed that no one announces. Before its next claim the poller gives back what its
	// instance holds (persistence.Claimer). So they come due again at once, not a lease later.
	// Only the poller's goroutine reads and writes it.
	orphans bool
	// window holds the ids claimed that this instance's dispatch satellite has not handled since.
	// A poll waits while windowIDs of them are within half a lease (claimWindow).
	window *claimWindow
}

// maxAnnouncing bounds the claimed batches being announced at once. Two let the next claim run
// while the broker confirms the previous announcement. With one, a backlog's drain waited for
// each confirmation in turn. More would only hold more ids leased in memory.
const maxAnnouncing = 2

// claimAhead is how long before the ids' announcement the poller claims them. It is about a
// claim's round trip on a busy store (SQLite's single writer, a loaded machine). make bench's
// precision rows measured it. So the claim is off the path from due to delivery.
const claimAhead = 20 * time.Millisecond

// announceLead is how long before their due time the poller announces claimed ids on a broker.
// It is about the trip of an announcement through a loaded broker to a dispatch satellite.
// make bench's precision rows measured it. The dispatch satellite holds the announcement until
// the due time it carries. Only then does it read the timeouts. So announcing ahead changes when
// a timeout is claimed and announced, never when it is delivered. A Cancel until the due time
// still wins. On an in-process GoChannel the trip is negligible. There a Publish waits until the
// announcement is handled, so a held one would hold up the next. So there the lead is 0.
const announceLead = 30 * time.Millisecond

// freshClock is how old a measurement of the store's clock may be for a claim to use it. An
// older one is measured again before the claim. The store's time is carried forward on the
// monotonic clock. So an older one is not wrong, only wider by the drift it allows for.
const freshClock = time.Second

// ahead is how long before a due time the poller claims. It is claimAhead before the
// announcement. It is at most an eighth of the lease, which covers it.
func (p *poller) ahead() time.Duration { return min(claimAhead+p.lead, p.lease/8) }

// announceAhead is how long before a due time the poller announces.
func (p *poller) announceAhead() time.Duration { return min(p.lead, p.ahead()/2) }

func (p *poller) init() {
	p.wakeCh = make(chan struct{}, 1)
	p.slots = make(chan struct{}, maxAnnouncing)
	p.window = newClaimWindow()
}

// handled tells the poller that this instance's dispatch satellite handled n announced ids.
func (p *poller) handled(n int) { p.window.handled(n) }

// wake tells the poller a timeout due at due was stored.
func (p *poller) wake(due time.Time) {
	if planned := p.plannedWake.Load(); planned != 0 && due.UnixNano() >= planned {
		return
	}
	select {
	case p.wakeCh <- struct{}{}:
	default:
	}
}

// run polls until ctx is done. The announcements it started may still be in flight (see wait).
func (p *poller) run(ctx context.Context) {
	var at time.Time
	for ctx.Err() == nil {
		p.setPlanned(time.Time{})
		next, idle, ok := p.poll(ctx, at)
		if !ok {
			at = time.Time{}
			continue // full batch or a failure already waited: go again at once
		}
		at = p.sleepUntil(ctx, next, idle)
	}
}

// poll claims one batch due at at (now if that is past or zero). It starts announcing it at
// that time. It returns when to look again, or ok == false to look again at once. idle says
// that nothing is due before next. Then next is PollInterval from now.
func (p *poller) poll(ctx context.Context, at time.Time) (next time.Time, idle, ok bool) {
	// A backlog waits in the store until the dispatchers are ready for it, not on the queue while
	// its lease runs out. Half a lease: announceClaimed gives up on a batch by then.
	if !p.window.await(ctx, p.clock.Now, windowIDs(p.batch), p.lease/2) {
		return time.Time{}, false, false
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return time.Time{}, false, false
	}
	if p.orphans && !p.releaseOrphans(ctx) {
		<-p.slots
		return time.Time{}, false, false
	}
	measured := false
	if p.clock.Clocked() {
		if age := p.clock.Age(); age < 0 || age > freshClock {
			if !p.measure(ctx) {
				<-p.slots
				return time.Time{}, false, false
			}
			measured = true
		}
	}
	// A time the store's clock has certainly reached: what is due at it is due on that clock.
	now := p.clock.Earliest()
	var dueBy time.Time // claiming ahead: the ids are due by now, said in their announcement
	if at.After(now) {
		now, dueBy = at, at
	}
	// A claim that started finishes, and is announced, even when ctx ends meanwhile. Cut short
	// after the database committed it, its ids would wait for their lease.
	claimCtx, end := p.fetch.Call(context.WithoutCancel(ctx))
	ids, err := p.claim(claimCtx, now)
	end(err)
	if err != nil {
		<-p.slots
		p.orphans = p.claimAs != ""
		if ctx.Err() == nil {
			p.logger.Error("Claiming due timeouts failed", err, nil)
			p.fetch.Failure(ctx, err)
		}
		return time.Time{}, false, false
	}
	p.fetch.Success()
	if p.onClaimed != nil {
		p.onClaimed(len(ids))
	}
	if len(ids) == 0 {
		<-p.slots
	} else {
		p.stop.claimed(ids, now.Add(p.lease))
		p.window.claimed(len(ids), p.clock.Now())
		p.announcing.Add(1)
		go func() {
			defer p.announcing.Done()
			if !p.awaitAnnouncing(ctx, now.Add(-p.announceAhead())) {
				p.stop.release(ids, "the stop came before they were announced")
				p.window.handled(len(ids))
				return
			}
			defer func() { <-p.slots }()
			p.announceClaimed(ctx, ids, now, dueBy)
		}()
		if len(ids) == p.batch {
			if !measured && p.clock.Clocked() {
				p.measure(ctx)
			}
			return time.Time{}, false, false
		}
	}
	if !measured && p.clock.Clocked() && !p.measure(ctx) {
		return time.Time{}, false, false
	}
	limit := p.clock.Now().Add(p.interval)
	nextCtx, end := p.fetch.Call(ctx)
	due, any, err := p.store.Next(nextCtx)
	end(err)
	if err != nil {
		if ctx.Err() == nil {
			p.logger.Error("Reading the next due time failed", err, nil)
			p.fetch.Failure(ctx, err)
		}
		return time.Time{}, false, false
	}
	if any && due.Before(limit) {
		return due, false, true
	}
	return limit, true, true
}

// measure measures the offset to the store's clock, as a call of the fetch breaker, and reports
// whether it did.
func (p *poller) measure(ctx context.Context) bool {
	callCtx, end := p.fetch.Call(ctx)
	_, err := p.clock.Measure(callCtx)
	end(err)
	if err != nil {
		if ctx.Err() == nil {
			p.logger.Error("Reading the store's clock failed", err, nil)
			p.fetch.Failure(ctx, err)
		}
		return false
	}
	return true
}

// releaseOrphans gives back the claims of the poller's instance after a claim that failed. It
// reports whether it did. It gives back the ids a lost answer left claimed. It also gives back
// those the poller is announcing. These are claimed and announced again. That is a duplicate
// announcement, which the dispatch satellite finds handled. At worst it is a duplicate delivery.
// It is never a loss and never early.
func (p *poller) releaseOrphans(ctx context.Context) bool {
	callCtx, end := p.fetch.Call(context.WithoutCancel(ctx))
	n, err := p.store.(persistence.Claimer).ReleaseClaimsOf(callCtx, p.claimAs)
	end(err)
	if err != nil {
		if ctx.Err() == nil {
			p.logger.Error("Giving back the claims a failed claim may have left failed", err, nil)
			p.fetch.Failure(ctx, err)
		}
		return false
	}
	p.fetch.Success()
	p.orphans = false
	// Every claim of the instance is given back, and will be claimed again: none is ours to wait for.
	p.window.reset()
	if n > 0 {
		p.logger.Info("Gave back the claims a failed claim may have left", watermill.LogFields{"released": n})
	}
	return true
}

// claim claims due ids, recording the manager's instance on them when it has one.
func (p *poller) claim(ctx context.Context, now time.Time) ([]string, error) {
	if p.claimAs != "" {
		return p.store.(persistence.Claimer).ClaimDueAs(ctx, p.claimAs, now, p.batch, p.lease)
	}
	return p.store.ClaimDue(ctx, now, p.batch, p.lease)
}

// sleepUntil sleeps until ahead before at, or until woken. It returns at when the poller is to
// claim what is due at at, ahead of it. It returns zero when it was woken (claim what is due now).
//
// An idle poller sleeps until at itself and then claims what is due now (it returns zero).
// Nothing is due at at, so there is nothing to claim ahead. Claiming ahead of it would also never
// sleep when PollInterval is shorter than ahead. Each look would plan the next one already in
// reach.
func (p *poller) sleepUntil(ctx context.Context, at time.Time, idle bool) time.Time {
	p.setPlanned(at)
	ahead := p.ahead()
	if idle {
		ahead = 0
	}
	d := at.Add(-ahead).Sub(p.clock.Now())
	if d <= 0 && !idle {
		return at
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		if !idle {
			return at
		}
	case <-p.wakeCh:
	}
	return time.Time{}
}

// awaitAnnouncing holds the slot of a claimed batch until at, the time to announce ids claimed
// ahead. Ids claimed when due go at once. It returns true holding the slot. Waiting is not
// announcing: the slot is free meanwhile. So the next due times of a steady stream are claimed
// ahead too, not one batch per slot in turn. It returns false, without the slot, when ctx ends
// first. The stop came before that.
func (p *poller) awaitAnnouncing(ctx context.Context, at time.Time) bool {
	d := at.Sub(p.clock.Now())
	if d <= 0 {
		return true
	}
	<-p.slots
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	select {
	case p.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// wait waits for the announcements in flight, after run.
func (p *poller) wait() { p.announcing.Wait() }

func (p *poller) setPlanned(at time.Time) {
	if at.IsZero() {
		p.plannedWake.Store(0)
		return
	}
	p.plannedWake.Store(at.UnixNano())
}

// confirmWait is how long an announcement waits for the broker's confirm. A confirm that comes
// late is not a failure: the ids were announced. Given up on, they are announced again, and two
// instances may then dispatch one id at once (a duplicate delivery). So it waits as long as the
// dispatch breaker lets the stage go without a success, not one CallTimeout. It is at most a
// quarter of the lease, so that a failed announcement is still retried before announceClaimed
// gives up.
func (p *poller) confirmWait() time.Duration {
	return max(p.dispatch.CallTimeout(), min(p.dispatch.TimeToWait(), p.lease/4))
}

// announceClaimed announces a batch claimed at claimedAt, due by dueBy (zero: due already). The
// ids of failed publishes are published again at the dispatch breaker's pace. A broker restart
// should cost its own length, not a lease. This goes on for half the lease. After that another
// poller may claim them soon, so they are left to it. An announcement that gets through disarms
// the dispatch breaker the failures armed. Ids whose announcement the stop cut short are given
// back to the store at once.
func (p *poller) announceClaimed(ctx context.Context, ids []string, claimedAt, dueBy time.Time) {
	giveUp := claimedAt.Add(p.lease / 2)
	for {
		err := p.announce(ctx, ids, dueBy)
		if err == nil {
			p.dispatch.Success()
			return
		}
		var na *announce.NotAnnouncedError
		if errors.As(err, &na) {
			ids = na.IDs
		}
		if p.stop.stopping() {
			p.logger.Debug("Announcing due timeouts cut short by the stop", watermill.LogFields{"count": len(ids), "error": err.Error()})
			p.stop.release(ids, "announcement cut short by the stop")
			p.window.handled(len(ids))
			return
		}
		retry := p.clock.Now().Add(p.retryDelay).Before(giveUp)
		p.logger.Error("Announcing due timeouts failed", err, watermill.LogFields{
			"count": len(ids), "retry": retry, "lease": p.lease})
		p.dispatch.Failure(ctx, err)
		if !retry || ctx.Err() != nil {
			p.window.handled(len(ids)) // not announced: no dispatch satellite will handle them
			return                     // claimed again when their lease runs out
		}
	}
}

// announce publishes claimed ids to the dispatcher queue, as a call of the dispatch breaker. Its
// deadline bounds it. It finishes even when ctx is cancelled by a shutdown. Ids claimed but not
// announced would wait for their lease to run out.
func (p *poller) announce(ctx context.Context, ids []string, dueBy time.Time) error {
	ctx, end := p.dispatch.CallWithin(context.WithoutCancel(ctx), p.confirmWait())
	err := p.announcer.PublishDue(ctx, ids, dueBy)
	end(err)
	return err
}
