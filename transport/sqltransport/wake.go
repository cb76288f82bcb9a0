package sqltransport

import "sync"

// wakeups tells a topic's idle consumers that rows were committed to it, so that they look at
// once rather than after their PollInterval. It only reaches consumers in this process that share
// it with the publisher (New gives its Publisher and Subscriber one, and Publisher.NewSubscriber
// shares the Publisher's); others find the rows at their next poll.
type wakeups struct {
	mu     sync.Mutex
	topics map[string]chan struct{} // closed and dropped to wake everyone waiting on the topic
}

func newWakeups() *wakeups { return &wakeups{topics: map[string]chan struct{}{}} }

// waiter returns a channel closed by the next notify of topic. Take it before looking at the
// table, so that rows committed after the look are not missed.
func (w *wakeups) waiter(topic string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.topics[topic]
	if !ok {
		ch = make(chan struct{})
		w.topics[topic] = ch
	}
	return ch
}

// notify wakes the consumers waiting on topic. Call it after the rows were committed.
func (w *wakeups) notify(topic string) {
	w.mu.Lock()
	ch, ok := w.topics[topic]
	delete(w.topics, topic)
	w.mu.Unlock()
	if ok {
		close(ch)
	}
}
