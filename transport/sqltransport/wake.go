package sqltransport

import "sync"

// wakeups tells a topic's sleeping consumers that rows were committed to it, so that they look at
// once rather than after their PollInterval. It only reaches consumers in this process that share
// it with the publisher (New gives its Publisher and Subscriber one, and Publisher.NewSubscriber
// shares the Publisher's); others find the rows at their next poll.
//
// A commit wakes one sleeping consumer, not all of them: with Consumers = 8, waking every
// consumer at every publish cost a trickle of messages some 30 statements a message (each woken
// consumer asked whether anything waits, began a transaction, found the row taken by the first
// and rolled back), 5,800 statements a second for 200 messages a second. Several consumers still
// drain a backlog side by side: a consumer that takes a full batch wakes the next (see take).
type wakeups struct {
	mu     sync.Mutex
	topics map[string]*topicWakeups
}

// topicWakeups is one topic's state: how many commits were notified, and who sleeps.
type topicWakeups struct {
	seq      uint64
	sleepers []chan struct{} // in the order they fell asleep: the longest asleep is woken first
}

func newWakeups() *wakeups { return &wakeups{topics: map[string]*topicWakeups{}} }

// topic returns topic's state, made on first use. The caller holds mu.
func (w *wakeups) topic(topic string) *topicWakeups {
	t, ok := w.topics[topic]
	if !ok {
		t = &topicWakeups{}
		w.topics[topic] = t
	}
	return t
}

// mark returns topic's count of notified commits. Take it before looking at the table and pass it
// to sleep, so that rows committed after the look are not missed.
func (w *wakeups) mark(topic string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.topic(topic).seq
}

// sleep returns a channel closed when a commit to topic wakes this consumer, closed already when
// a commit was notified since mark. Whoever sleeps must call the returned leave when it stops
// waiting, woken or not.
func (w *wakeups) sleep(topic string, mark uint64) (woken <-chan struct{}, leave func(looking bool)) {
	ch := make(chan struct{})
	w.mu.Lock()
	t := w.topic(topic)
	if t.seq != mark {
		w.mu.Unlock()
		close(ch)
		return ch, func(bool) {}
	}
	t.sleepers = append(t.sleepers, ch)
	w.mu.Unlock()
	return ch, func(looking bool) { w.leave(topic, ch, looking) }
}

// leave takes a sleeper that stopped waiting off topic's list. One that was woken but will not
// look (its subscription is ending) hands its wake-up on, so that the rows are not left to the
// next poll.
func (w *wakeups) leave(topic string, ch chan struct{}, looking bool) {
	w.mu.Lock()
	t := w.topic(topic)
	for i, s := range t.sleepers {
		if s == ch {
			t.sleepers = append(t.sleepers[:i], t.sleepers[i+1:]...)
			w.mu.Unlock()
			return
		}
	}
	w.mu.Unlock()
	if !looking {
		w.wakeOne(topic)
	}
}

// notify wakes one consumer asleep on topic; consumers looking since before the commit look
// again before they sleep. Call it after the rows were committed.
func (w *wakeups) notify(topic string) {
	w.mu.Lock()
	t, ok := w.topics[topic] // none: no consumer here has looked at topic (a publisher's own topics)
	if ok {
		t.seq++
	}
	w.mu.Unlock()
	if ok {
		w.wakeOne(topic)
	}
}

// wakeOne wakes the consumer asleep on topic the longest, if any.
func (w *wakeups) wakeOne(topic string) {
	w.mu.Lock()
	t, ok := w.topics[topic]
	if !ok || len(t.sleepers) == 0 {
		w.mu.Unlock()
		return
	}
	ch := t.sleepers[0]
	t.sleepers = append(t.sleepers[:0], t.sleepers[1:]...)
	w.mu.Unlock()
	close(ch)
}
