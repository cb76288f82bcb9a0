package recoverability_test

import (
	"context"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// durableQueues stands in for a broker's durable queues (AMQP queues, SQL tables) where a test
// needs what GoChannel cannot give: messages that outlive the router consuming them. GoChannel
// discards whatever a subscription holds or has queued when it ends, and closing a router closes
// the GoChannel itself, so no GoChannel setup keeps a deferred queue across a restart.
//
// A message stays on its queue until a consumer acks it; a nack, or a consumer that goes away
// while holding it, puts it back at the head. Consumers of one queue compete, one message in
// flight each (AMQP with prefetch 1). Close does nothing: the broker outlives routers.
type durableQueues struct {
	mu     sync.Mutex
	queues map[string][]*message.Message
	signal map[string]chan struct{} // closed and replaced when a queue gets a message
}

func newDurableQueues() *durableQueues {
	return &durableQueues{queues: map[string][]*message.Message{}, signal: map[string]chan struct{}{}}
}

func (d *durableQueues) Publish(topic string, msgs ...*message.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range msgs {
		d.queues[topic] = append(d.queues[topic], m.Copy())
	}
	d.notifyLocked(topic)
	return nil
}

func (d *durableQueues) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for {
			msg, ok := d.next(ctx, topic)
			if !ok {
				return
			}
			if !d.deliver(ctx, topic, msg, out) {
				return
			}
		}
	}()
	return out, nil
}

// next takes the head of topic, waiting for one, or returns false when ctx ends.
func (d *durableQueues) next(ctx context.Context, topic string) (*message.Message, bool) {
	for {
		d.mu.Lock()
		if q := d.queues[topic]; len(q) > 0 {
			d.queues[topic] = q[1:]
			d.mu.Unlock()
			return q[0], true
		}
		wait := d.signalLocked(topic)
		d.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// deliver hands msg to the consumer until it is acked; false when the consumer went away.
func (d *durableQueues) deliver(ctx context.Context, topic string, msg *message.Message, out chan<- *message.Message) bool {
	for {
		m := msg.Copy()
		m.SetContext(ctx)
		select {
		case out <- m:
		case <-ctx.Done():
			d.requeue(topic, msg)
			return false
		}
		select {
		case <-m.Acked():
			return true
		case <-m.Nacked():
		case <-ctx.Done():
			d.requeue(topic, msg)
			return false
		}
	}
}

func (d *durableQueues) requeue(topic string, msg *message.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queues[topic] = append([]*message.Message{msg}, d.queues[topic]...)
	d.notifyLocked(topic)
}

func (d *durableQueues) signalLocked(topic string) chan struct{} {
	if d.signal[topic] == nil {
		d.signal[topic] = make(chan struct{})
	}
	return d.signal[topic]
}

func (d *durableQueues) notifyLocked(topic string) {
	if ch := d.signal[topic]; ch != nil {
		close(ch)
	}
	d.signal[topic] = make(chan struct{})
}

// Len counts the messages on topic that no consumer holds.
func (d *durableQueues) Len(topic string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queues[topic])
}

func (d *durableQueues) Close() error { return nil }
