package acceptance

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
)

// TestDeliveryThroughput measures one endpoint instance delivering 2,000 timeouts due at one
// instant, with one consumer per satellite queue (Watermill's default: one message at a time)
// and with eight. It logs the figures and asserts only that everything arrived once.
func TestDeliveryThroughput(t *testing.T) {
	t.Parallel()
	if testing.Short() || raceEnabled {
		t.Skip("a measurement, not a check: skipped with -short and under the race detector, which slows everything down many times")
	}
	const count = 2000
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, consumers := range []int{1, 8} {
			t.Run(fmt.Sprintf("consumers=%d", consumers), func(t *testing.T) {
				e := newEnv(t, "rate")
				e.consumers = consumers
				store := b.database(t, e.endpoint)(t)
				n := startNode(t, e, "a", store, nil)
				dest := e.queue("due")
				delivered := receive(t, e, dest)

				due := time.Now().Add(10 * time.Second)
				msgs := make([]*message.Message, count)
				for i := range msgs {
					msgs[i] = message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "%d", i))
					timeouts.DeliverAt(msgs[i], due)
				}
				start := time.Now()
				publishConcurrently(t, n.manager.Publisher(), dest, msgs, 8)
				published := time.Since(start)
				stored := waitStored(t, store, count, due)

				seen := make(map[string]bool, count)
				var last time.Time
				for len(seen) < count {
					got := await(t, delivered, untilDue(due)+stallBound)
					require.False(t, seen[got.msg.UUID], "message %s delivered twice", got.msg.UUID)
					seen[got.msg.UUID] = true
					last = got.at
				}
				spread := last.Sub(due)
				t.Logf("%s, %d consumer(s): publish %.0f msg/s (8 goroutines), %s; last of %d delivered %s after due: %.0f deliveries/s",
					b.name, consumers, count/published.Seconds(), storedNote(stored, start),
					count, spread.Round(time.Millisecond), count/spread.Seconds())
			})
		}
	})
}
