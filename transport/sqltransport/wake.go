package sqltransport

import (
	"sync"
	"time"
)

// wakeups tells a topic's sleeping consumers when to look: at once when rows were committed to
// it, and once every PollInterval for rows that came from elsewhere. Commits reach only
// consumers in this process that share it with the publisher (New gives its Publisher and
// Subscriber one, and Publisher.NewSubscriber shares the Publisher's); others find the rows at
// the next poll.
//
// A commit wakes one sleeping consumer, not all of them: waking every consumer at every publish
// would cost a trickle of messages several statements a message per consumer (each woken
// consumer asks whether anything waits, begins a transaction, finds the row taken by the first
// and rolls back). Several consumers still drain a backlog side by side: a consumer that takes a
// full batch wakes the next (see take).
//
// The poll is the topic's, not each consumer's: while consumers sleep on a topic, one timer
// wakes the one asleep the longest every PollInterval, and that one asks the table. Idle
// consumers on a topic so ask as often as one would, however many there are.
type wakeups struct {
	mu     sync.Mutex
	topics map[string]*topicWakeups
}

// topicWakeups is one topic's state: how many commits were notified, who sleeps, and the poll.
type topicWakeups struct {
	seq      uint64
	sleepers []*sleeper // in the order they fell asleep: the longest asleep is woken first
	// poll is armed while anyone sleeps: it fires at pollAt and is then armed again for
	// interval, the shortest any sleeper asked for. pollGen tells a stopped timer's late call
	// from the current one's.
	poll     *time.Timer
	pollAt   time.Time
	interval time.Duration
	pollGen  uint64
}

// sleeper is a consumer asleep on a topic.
type sleeper struct {
	woken chan struct{}
	// polled is set before woken is closed when the poll woke it rather than a commit: it should
	// ask whether anything waits before it begins a transaction. Read it once woken is closed.
	polled bool
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

// sleep puts a consumer to sleep on topic until a commit or the topic's poll wakes it; its
// woken is closed already when a commit was notified since mark. poll is how often the consumer
// wants the table asked while it sleeps. Whoever sleeps must call the returned leave when it
// stops waiting, woken or not.
func (w *wakeups) sleep(topic string, mark uint64, poll time.Duration) (s *sleeper, leave func(looking bool)) {
	s = &sleeper{woken: make(chan struct{})}
	w.mu.Lock()
	t := w.topic(topic)
	if t.seq != mark {
		w.mu.Unlock()
		close(s.woken)
		return s, func(bool) {}
	}
	t.sleepers = append(t.sleepers, s)
	w.armPoll(topic, t, poll)
	w.mu.Unlock()
	return s, func(looking bool) { w.leave(topic, s, looking) }
}

// armPoll makes sure topic's poll fires within poll. The caller holds mu.
func (w *wakeups) armPoll(topic string, t *topicWakeups, poll time.Duration) {
	if t.interval == 0 || poll < t.interval {
		t.interval = poll
	}
	at := time.Now().Add(poll)
	if t.poll != nil && !t.pollAt.After(at) {
		return
	}
	w.startPoll(topic, t, poll, at)
}

// startPoll (re)starts topic's poll timer to fire after d, at at. The caller holds mu.
func (w *wakeups) startPoll(topic string, t *topicWakeups, d time.Duration, at time.Time) {
	if t.poll != nil {
		t.poll.Stop()
	}
	t.pollGen++
	gen := t.pollGen
	t.pollAt = at
	t.poll = time.AfterFunc(d, func() { w.polled(topic, gen) })
}

// stopPoll stops topic's poll. The caller holds mu.
func (t *topicWakeups) stopPoll() {
	if t.poll != nil {
		t.poll.Stop()
	}
	t.poll, t.pollAt, t.interval = nil, time.Time{}, 0
	t.pollGen++
}

// polled is the poll timer's call: it wakes the consumer asleep the longest to ask the table, and
// arms the next poll for those still asleep.
func (w *wakeups) polled(topic string, gen uint64) {
	w.mu.Lock()
	t, ok := w.topics[topic]
	if !ok || t.pollGen != gen {
		w.mu.Unlock()
		return // stopped or restarted meanwhile
	}
	s := t.pop(true)
	if len(t.sleepers) > 0 {
		w.startPoll(topic, t, t.interval, time.Now().Add(t.interval))
	} else {
		t.stopPoll()
	}
	w.mu.Unlock()
	if s != nil {
		close(s.woken)
	}
}

// pop takes the sleeper asleep the longest off the list, if any, and records why it is woken.
// The caller holds mu and closes its woken after unlocking.
func (t *topicWakeups) pop(polled bool) *sleeper {
	if len(t.sleepers) == 0 {
		return nil
	}
	s := t.sleepers[0]
	t.sleepers = append(t.sleepers[:0], t.sleepers[1:]...)
	s.polled = polled
	return s
}

// leave takes a sleeper that stopped waiting off topic's list; the last one to leave stops the
// poll. One that was woken but will not look (its subscription is ending) hands its wake-up on,
// so that neither a commit's rows nor a poll is lost.
func (w *wakeups) leave(topic string, s *sleeper, looking bool) {
	w.mu.Lock()
	t := w.topic(topic)
	for i, other := range t.sleepers {
		if other == s {
			t.sleepers = append(t.sleepers[:i], t.sleepers[i+1:]...)
			if len(t.sleepers) == 0 {
				t.stopPoll()
			}
			w.mu.Unlock()
			return
		}
	}
	polled := s.polled // set under mu by whoever woke it
	w.mu.Unlock()
	if !looking {
		w.wakeOne(topic, polled)
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
		w.wakeOne(topic, false)
	}
}

// wakeOne wakes the consumer asleep on topic the longest, if any: to ask the table first when
// polled, to take at once when rows are known to wait.
func (w *wakeups) wakeOne(topic string, polled bool) {
	w.mu.Lock()
	var s *sleeper
	if t, ok := w.topics[topic]; ok {
		s = t.pop(polled)
	}
	w.mu.Unlock()
	if s != nil {
		close(s.woken)
	}
}
