package amqptransport

import (
	"sync"
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
// and one write for a whole batch a satellite handled), the acks of deliveries behind one still
// being handled go one by one, so they never hold prefetch slots while it runs; nacks (requeue)
// go one by one, always before a multiple-ack that covers their tags, which the broker would
// otherwise take as acked.
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
	for {
		select {
		case <-a.wake:
			a.flush()
		case <-a.done:
			a.flush()
			return
		}
	}
}

// flush sends the nacks, the multiple-ack of the settled front and the single acks behind it.
// Errors mean the channel is gone, with which the broker requeued every unacked delivery.
func (a *acker) flush() {
	var nacks, singles []uint64
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
			singles = append(singles, a.queue[i].tag)
			a.queue[i].state = sent
		}
	}
	a.mu.Unlock()

	for _, tag := range nacks {
		if a.ch.Nack(tag, false, true) != nil {
			return
		}
	}
	if multiple != 0 {
		if a.ch.Ack(multiple, true) != nil {
			return
		}
	}
	for _, tag := range singles {
		if a.ch.Ack(tag, false) != nil {
			return
		}
	}
}
