package acceptance

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// TestTwoManagersDeliverEachOfManyTimeoutsExactlyOnce runs two instances of one endpoint (two
// routers, each on connections of its own and a store handle of its own on one database), as two
// `timeoutmill run` processes would, and schedules 2,000 timeouts all due at one instant. Each
// must arrive once: no process crashes here, so no duplicate is acceptable. It logs the publish
// rate and how long after the due instant the last one arrived.
func TestTwoManagersDeliverEachOfManyTimeoutsExactlyOnce(t *testing.T) {
	t.Parallel()
	const count = 2000
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, "two")
		open := b.database(t, e.endpoint)
		storeA, storeB := open(t), open(t)
		a := startNode(t, e, "a", storeA, nil)
		startNode(t, e, "b", storeB, nil)
		dest := e.queue("due")
		delivered := receive(t, e, dest)

		// Publish 2,000 delayed messages through instance a's publisher from 8 goroutines, all
		// due at one instant well after publishing and storing should be over.
		due := time.Now().Add(10 * time.Second)
		ids := make(map[string]bool, count)
		msgs := make([]*message.Message, count)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "%d", i))
			timeouts.DeliverAt(msgs[i], due)
			ids[msgs[i].UUID] = true
		}
		start := time.Now()
		publishConcurrently(t, a.manager.Publisher(), dest, msgs, 8)
		published := time.Since(start)
		stored := waitStored(t, storeA, count, due)
		t.Logf("%s: published %d delayed messages in %s (%.0f msg/s, 8 goroutines); %s",
			b.name, count, published.Round(time.Millisecond), count/published.Seconds(), storedNote(stored, start))

		seen := make(map[string]int, count)
		var first, last time.Time
		for len(seen) < count {
			got := await(t, delivered, untilDue(due)+stallBound)
			require.False(t, got.at.Before(wireparse.RoundUp(due)), "message %s delivered %s early", got.msg.UUID, due.Sub(got.at))
			require.True(t, ids[got.msg.UUID], "unknown message %s", got.msg.UUID)
			seen[got.msg.UUID]++
			require.Equal(t, 1, seen[got.msg.UUID], "message %s delivered twice", got.msg.UUID)
			if first.IsZero() {
				first = got.at
			}
			last = got.at
		}
		requireNothing(t, delivered, 3*time.Second) // duplicates would come now, if at all
		require.Eventually(t, func() bool { return pending(t, storeA) == 0 }, lateBound, 50*time.Millisecond)
		spread := last.Sub(due)
		t.Logf("%s: %d timeouts due at one instant: first delivered %s after due, last %s after due (%.0f deliveries/s), each exactly once",
			b.name, count, first.Sub(due).Round(time.Millisecond), spread.Round(time.Millisecond), count/spread.Seconds())
	})
}

// publishConcurrently publishes msgs to topic from n goroutines, one message per Publish call.
func publishConcurrently(t *testing.T, pub message.Publisher, topic string, msgs []*message.Message, n int) {
	t.Helper()
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Value
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) {
					return
				}
				if err := pub.Publish(topic, msgs[i]); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		require.NoError(t, err)
	}
}

// waitStored waits until store holds count timeouts, or until due, when deliveries start to take
// them out again. It returns when all were stored, or the zero time if due came first.
func waitStored(t *testing.T, store persistence.Store, count int, due time.Time) time.Time {
	t.Helper()
	for time.Now().Before(due) {
		if pending(t, store) >= count {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Time{}
}

// storedNote says when storing finished, for the log.
func storedNote(stored, start time.Time) string {
	if stored.IsZero() {
		return "storing outlasted the due time, so the delivery figure includes storing"
	}
	return fmt.Sprintf("all stored %s after the first publish", stored.Sub(start).Round(time.Millisecond))
}
