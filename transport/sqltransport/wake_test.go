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

// woken reports whether ch is closed.
func woken(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestACommitWakesOneSleeperTheLongestAsleep(t *testing.T) {
	w := newWakeups()
	var chans []<-chan struct{}
	for range 3 {
		ch, leave := w.sleep("q", w.mark("q"))
		t.Cleanup(func() { leave(true) })
		chans = append(chans, ch)
	}
	w.notify("q")
	require.True(t, woken(chans[0]))
	require.False(t, woken(chans[1]))
	require.False(t, woken(chans[2]))
	w.notify("q")
	require.True(t, woken(chans[1]))
	require.False(t, woken(chans[2]))
	w.notify("other")
	require.False(t, woken(chans[2]), "a commit to another topic wakes nobody here")
}

func TestACommitDuringTheLookWakesTheLooker(t *testing.T) {
	w := newWakeups()
	mark := w.mark("q")
	w.notify("q") // committed while the consumer looked at the table
	ch, leave := w.sleep("q", mark)
	defer leave(true)
	require.True(t, woken(ch), "rows committed after the look must not wait for the poll")

	ch2, leave2 := w.sleep("q", w.mark("q"))
	defer leave2(true)
	require.False(t, woken(ch2))
}

func TestASleeperThatLeavesIsNotWokenAndPassesOnAWakeUpItWillNotUse(t *testing.T) {
	w := newWakeups()
	a, leaveA := w.sleep("q", w.mark("q"))
	b, leaveB := w.sleep("q", w.mark("q"))
	defer leaveB(true)
	leaveA(true) // its poll came first
	w.notify("q")
	require.False(t, woken(a))
	require.True(t, woken(b), "the wake-up goes to one still asleep")

	c, leaveC := w.sleep("q", w.mark("q"))
	d, leaveD := w.sleep("q", w.mark("q"))
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

// untilAsleep waits for a new subscription's consumers to have made their first look, which finds
// the queue empty, and to have gone to sleep.
func untilAsleep(t *testing.T, sub *Subscriber, consumers int) {
	t.Helper()
	require.Eventually(t, func() bool { return sub.takes.Load() >= int64(consumers) }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
}

// TestOnePublishWakesOneConsumer: with eight idle consumers, each message published makes one of
// them take it, in one transaction. Woken all at once, each began a transaction and most rolled
// back empty-handed: some 8.6 transactions a message. And a consumer that took less than a full
// batch sleeps rather than look again and find nothing: 2 a message.
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
