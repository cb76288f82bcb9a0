package sqltransport

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// woken reports whether s was woken.
func woken(s *sleeper) bool {
	select {
	case <-s.woken:
		return true
	default:
		return false
	}
}

// noPoll is a poll interval long enough for the unit tests of commits not to meet a poll.
const noPoll = time.Hour

// asleep puts n consumers to sleep on topic "q", in order, until the test ends.
func asleep(t *testing.T, w *wakeups, n int) []*sleeper {
	t.Helper()
	var sleepers []*sleeper
	for range n {
		s, leave := w.sleep("q", w.mark("q"), noPoll)
		t.Cleanup(func() { leave(true) })
		sleepers = append(sleepers, s)
	}
	return sleepers
}

func TestACommitWakesOneSleeperTheLongestAsleep(t *testing.T) {
	w := newWakeups()
	sleepers := asleep(t, w, 3)
	w.notify("q")
	require.True(t, woken(sleepers[0]))
	require.False(t, sleepers[0].polled, "a commit says rows wait: take them without asking first")
	require.False(t, woken(sleepers[1]))
	require.False(t, woken(sleepers[2]))
	w.notify("q")
	require.True(t, woken(sleepers[1]))
	require.False(t, woken(sleepers[2]))
	w.notify("other")
	require.False(t, woken(sleepers[2]), "a commit to another topic wakes nobody here")
}

func TestACommitDuringTheLookWakesTheLooker(t *testing.T) {
	w := newWakeups()
	mark := w.mark("q")
	w.notify("q") // committed while the consumer looked at the table
	s, leave := w.sleep("q", mark, noPoll)
	defer leave(true)
	require.True(t, woken(s), "rows committed after the look must not wait for the poll")

	s2, leave2 := w.sleep("q", w.mark("q"), noPoll)
	defer leave2(true)
	require.False(t, woken(s2))
}

func TestASleeperThatLeavesIsNotWokenAndPassesOnAWakeUpItWillNotUse(t *testing.T) {
	w := newWakeups()
	a, leaveA := w.sleep("q", w.mark("q"), noPoll)
	b, leaveB := w.sleep("q", w.mark("q"), noPoll)
	defer leaveB(true)
	leaveA(true) // its subscription ended first
	w.notify("q")
	require.False(t, woken(a))
	require.True(t, woken(b), "the wake-up goes to one still asleep")

	c, leaveC := w.sleep("q", w.mark("q"), noPoll)
	d, leaveD := w.sleep("q", w.mark("q"), noPoll)
	defer leaveD(true)
	w.notify("q")
	require.True(t, woken(c))
	leaveC(false) // woken, but its subscription is ending: it will not look
	require.True(t, woken(d), "the wake-up it got goes on to the next sleeper")
}

func TestCommitsToTopicsNoConsumerWatchesLeaveNoState(t *testing.T) {
	w := newWakeups()
	for i := range 100 {
		w.notify(fmt.Sprintf("published-only-%d", i))
	}
	require.Empty(t, w.topics)
}

// TestThePollWakesOneSleeperAtATime: three consumers asleep on a topic are polled one at a time,
// the longest asleep first, each told to ask before it takes; once nobody sleeps, the poll stops.
// The timer's calls are made by hand (its interval is an hour), so that a slow machine cannot
// fire two polls between the test's looks.
func TestThePollWakesOneSleeperAtATime(t *testing.T) {
	w := newWakeups()
	sleepers := asleep(t, w, 3)
	fire := func() {
		w.mu.Lock()
		gen := w.topics["q"].pollGen
		w.mu.Unlock()
		w.polled("q", gen)
	}
	for i, s := range sleepers {
		fire()
		require.True(t, woken(s), "poll %d wakes the one asleep the longest", i+1)
		require.True(t, s.polled, "a poll does not know that rows wait: ask first")
		for _, later := range sleepers[i+1:] {
			require.False(t, woken(later), "a poll wakes one sleeper")
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Nil(t, w.topics["q"].poll, "nobody sleeps: the poll stopped")
}

// TestThePollTimerFires: a real timer wakes a sleeper after its interval.
func TestThePollTimerFires(t *testing.T) {
	w := newWakeups()
	s, leave := w.sleep("q", w.mark("q"), 10*time.Millisecond)
	defer leave(true)
	select {
	case <-s.woken:
		require.True(t, s.polled)
	case <-time.After(10 * time.Second):
		t.Fatal("the poll did not come")
	}
}

func TestThePollStopsWhenTheLastSleeperLeavesAndAnUnusedPollIsPassedOn(t *testing.T) {
	w := newWakeups()
	a, leaveA := w.sleep("q", w.mark("q"), noPoll)
	leaveA(true)
	w.mu.Lock()
	require.Nil(t, w.topics["q"].poll)
	w.mu.Unlock()
	require.False(t, woken(a))

	b, leaveB := w.sleep("q", w.mark("q"), 20*time.Millisecond)
	c, leaveC := w.sleep("q", w.mark("q"), noPoll)
	defer leaveC(true)
	select {
	case <-b.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the poll did not come")
	}
	leaveB(false) // polled, but its subscription is ending
	require.True(t, woken(c), "the poll it will not make goes to the next sleeper")
	require.True(t, c.polled, "and is still a poll: ask first")
}

// untilAsleep waits for a new subscription's consumers to have made their first look, which finds
// the queue empty, and to have gone to sleep.
func untilAsleep(t *testing.T, sub *Subscriber, consumers int) {
	t.Helper()
	require.Eventually(t, func() bool { return sub.takes.Load() >= int64(consumers) }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
}

// TestOnePublishWakesOneConsumer: with eight idle consumers, each message published makes one of
// them take it, in one transaction. Woken all at once, each would begin a transaction and most
// would roll back empty-handed. And a consumer that took less than a full batch sleeps rather
// than look again and find nothing.
func TestOnePublishWakesOneConsumer(t *testing.T) {
	t.Parallel()
	const messages = 20
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.Consumers = 8
		config.PollInterval = time.Hour // only wake-ups make a consumer look
		pub, sub := newPubSub(t, config)
		msgs, err := sub.Subscribe(t.Context(), "trickle")
		require.NoError(t, err)
		// Each consumer looks once as it starts, and finds nothing.
		untilAsleep(t, sub, config.Consumers)
		before := sub.takes.Load()
		for i := range messages {
			require.NoError(t, pub.Publish("trickle", message.NewMessage(fmt.Sprintf("m-%d", i), nil)))
			next(t, msgs).Ack()
			require.Eventually(t, func() bool { return db.count(t, "trickle") == 0 }, 10*time.Second, 5*time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // the looks after the last take
		takes := sub.takes.Load() - before
		t.Logf("%s: %d transactions for %d messages published one by one to 8 idle consumers", db.dialect, takes, messages)
		require.LessOrEqual(t, takes, int64(messages+messages/2))
	})
}

// TestAnIdleTopicIsPolledOnceAnInterval: eight idle consumers on a topic ask the database as
// often as one would, once a PollInterval, not once each. A row another process writes (no
// wake-up reaches the consumers) is still found by the poll.
func TestAnIdleTopicIsPolledOnceAnInterval(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.Consumers = 8
		config.PollInterval = 50 * time.Millisecond
		sub, err := NewSubscriber(t.Context(), config, testLogger())
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, sub.Close()) })
		msgs, err := sub.Subscribe(t.Context(), "idle")
		require.NoError(t, err)
		untilAsleep(t, sub, config.Consumers)

		before, start := sub.probes.Load(), time.Now()
		time.Sleep(time.Second)
		probes, elapsed := sub.probes.Load()-before, time.Since(start)
		intervals := int64(elapsed / config.PollInterval)
		t.Logf("%s: %d polls in %s by %d idle consumers (%d intervals)", db.dialect, probes, elapsed.Round(time.Millisecond), config.Consumers, intervals)
		require.Positive(t, probes, "an idle topic is still polled")
		require.LessOrEqual(t, probes, intervals+2, "one poll an interval, whoever makes it")

		other, err := NewPublisher(t.Context(), config, testLogger()) // its commits wake nobody in sub
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, other.Close()) })
		require.NoError(t, other.Publish("idle", message.NewMessage("from-elsewhere", nil)))
		m := next(t, msgs)
		require.Equal(t, "from-elsewhere", m.UUID)
		m.Ack()
	})
}

// TestABacklogFansOutToEveryConsumer: a commit wakes one consumer, but a consumer that takes a
// full batch wakes the next, so a backlog is taken by all of them side by side: here every
// consumer holds a batch before any message is acked.
func TestABacklogFansOutToEveryConsumer(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.Consumers = 4
		config.BatchSize = 5
		config.PollInterval = time.Hour // only wake-ups make a consumer look
		pub, sub := newPubSub(t, config)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		msgs, err := sub.Subscribe(ctx, "backlog")
		require.NoError(t, err)
		untilAsleep(t, sub, config.Consumers)

		total := config.Consumers * config.BatchSize
		publishN(t, pub, "backlog", total) // one commit
		var held []*message.Message
		for range total {
			held = append(held, next(t, msgs)) // not acked: each consumer keeps its batch
		}
		var wg sync.WaitGroup
		for _, m := range held {
			wg.Go(func() { m.Ack() })
		}
		wg.Wait()
		require.Eventually(t, func() bool { return db.count(t, "backlog") == 0 }, 10*time.Second, 5*time.Millisecond)
	})
}
