package amqptransport

import (
	"sync"
	"time"
)

// ackState is where a delivery stands with the acker.
type ackState uint8

const (
	unsettled   ackState = iota // handed out, no ack or nack yet
	ackPending                  // acked by its handler, not yet sent
	nackPending                 // nacked by its handler, not yet sent
	sent                        // its ack or nack is on its way to the broker
)

type ackEntry struct {
	tag   uint64
	state ackState
}

// acker sends a channel's acks and nacks from one goroutine, in few frames: the acks of the
// settled deliveries at the front of the channel's deliveries go as one multiple-ack (one frame
// and one write for a whole batch a satellite handled); the acks of deliveries behind one still
// being handled wait up to singlesDelay for it, then go one by one, so they never hold the
// broker's prefetch window for long; nacks (requeue) go one by one, always before a
// multiple-ack that covers their tags, which the broker would otherwise take as acked.
//
// A multiple-ack names the highest of its deliveries not yet acked or nacked: RabbitMQ closes the
// channel ("unknown delivery tag") when the tag a multiple-ack names is settled already.
type acker struct {
	ch     ackChannel
	mu     sync.Mutex
	queue  []ackEntry // delivered and not covered by a multiple-ack yet, in delivery order
	wake   chan struct{}
	done   chan struct{}
	exited chan struct{}
	once   sync.Once
}

// singlesDelay is how long acks behind a delivery still being handled wait for it to be settled,
// so that one multiple-ack covers them all. Batches a satellite handles side by side finish
// within a few milliseconds of each other, out of order.
const singlesDelay = 5 * time.Millisecond

// ackChannel is what the acker needs of an *amqp.Channel.
type ackChannel interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

func newAcker(ch ackChannel) *acker {
	a := &acker{ch: ch, wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	go a.run()
	return a
}

// delivered records a delivery, before it is handed out. Tags must come in delivery order.
func (a *acker) delivered(tag uint64) {
	a.mu.Lock()
	a.queue = append(a.queue, ackEntry{tag: tag})
	a.mu.Unlock()
}

func (a *acker) ack(tag uint64)  { a.settle(tag, ackPending) }
func (a *acker) nack(tag uint64) { a.settle(tag, nackPending) }

func (a *acker) settle(tag uint64, state ackState) {
	a.mu.Lock()
	// Settled deliveries are mostly near the front; search from there.
	for i := range a.queue {
		if a.queue[i].tag == tag {
			if a.queue[i].state == unsettled {
				a.queue[i].state = state
			}
			break
		}
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// stop sends what is settled and stops the acker. It is safe to call more than once.
func (a *acker) stop() {
	a.once.Do(func() { close(a.done) })
	<-a.exited
}

func (a *acker) run() {
	defer close(a.exited)
	singles := time.NewTimer(time.Hour)
	singles.Stop()
	armed := false
	for {
		var waiting bool
		select {
		case <-a.wake:
			waiting = a.flush(false)
		case <-singles.C:
			armed = false
			waiting = a.flush(true)
		case <-a.done:
			singles.Stop()
			a.flush(true)
			return
		}
		if waiting && !armed {
			singles.Reset(singlesDelay)
			armed = true
		}
	}
}

// flush sends the nacks and the multiple-ack of the settled front, and with singles the acks
// behind the front one by one. It reports whether acks are left waiting behind the front.
// Errors mean the channel is gone, with which the broker requeued every unacked delivery.
func (a *acker) flush(singles bool) (waiting bool) {
	var nacks, acks []uint64
	var multiple uint64
	a.mu.Lock()
	front := 0
	for front < len(a.queue) && a.queue[front].state != unsettled {
		switch a.queue[front].state {
		case nackPending:
			nacks = append(nacks, a.queue[front].tag)
		case ackPending:
			multiple = a.queue[front].tag
		}
		front++
	}
	a.queue = a.queue[front:]
	for i := range a.queue {
		switch a.queue[i].state {
		case nackPending:
			nacks = append(nacks, a.queue[i].tag)
			a.queue[i].state = sent
		case ackPending:
			if singles {
				acks = append(acks, a.queue[i].tag)
				a.queue[i].state = sent
			} else {
				waiting = true
			}
		}
	}
	a.mu.Unlock()

	for _, tag := range nacks {
		if a.ch.Nack(tag, false, true) != nil {
			return false
		}
	}
	if multiple != 0 {
		if a.ch.Ack(multiple, true) != nil {
			return false
		}
	}
	for _, tag := range acks {
		if a.ch.Ack(tag, false) != nil {
			return false
		}
	}
	return waiting
}
