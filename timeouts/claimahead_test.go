package timeouts_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// claimRecorder records, for each id ClaimDue returned, when the call started and the instant it
// claimed at.
type claimRecorder struct {
	inner
	mu     sync.Mutex
	called map[string]time.Time
	at     map[string]time.Time
}

func (c *claimRecorder) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	called := time.Now()
	ids, err := c.inner.ClaimDue(ctx, now, limit, lease)
	c.mu.Lock()
	for _, id := range ids {
		c.called[id], c.at[id] = called, now
	}
	c.mu.Unlock()
	return ids, err
}

// announcementRecorder records when each id was announced on the dispatcher queue.
type announcementRecorder struct {
	message.Publisher
	topic string
	mu    sync.Mutex
	at    map[string]time.Time
}

func (a *announcementRecorder) Publish(topic string, msgs ...*message.Message) error {
	if topic == a.topic {
		now := time.Now()
		a.mu.Lock()
		for _, m := range msgs {
			ids, err := dispatcherqueue.Decode(m)
			if err == nil {
				for _, id := range ids {
					a.at[id] = now
				}
			}
		}
		a.mu.Unlock()
	}
	return a.Publisher.Publish(topic, msgs...)
}

// TestClaimedAheadAnnouncedNotBeforeDue: the poller may claim a timeout shortly before it is due,
// so that the claim is done when the time comes, but it announces it, and the dispatcher delivers
// it, only once due; and it claims no further ahead than a fraction of the lease.
func TestClaimedAheadAnnouncedNotBeforeDue(t *testing.T) {
	t.Parallel()
	claims := &claimRecorder{inner: memory.New(), called: map[string]time.Time{}, at: map[string]time.Time{}}
	var announced *announcementRecorder
	b := setup(t, claims, func(c *timeouts.Config) {
		announced = &announcementRecorder{Publisher: c.Publisher, topic: wire.DispatcherQueue(endpoint), at: map[string]time.Time{}}
		c.Publisher = announced
	})
	delivered := subscribe(t, b.pubSub, "dest")

	// Timeouts due one after another, 50 ms apart, as a steady stream is.
	const n = 20
	dues := map[string]time.Time{}
	start := time.Now().Add(300 * time.Millisecond)
	for i := range n {
		msg := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		due := start.Add(time.Duration(i) * 50 * time.Millisecond)
		timeouts.DeliverAt(msg, due)
		dues[msg.UUID] = due
		require.NoError(t, b.manager.Publisher().Publish("dest", msg))
	}
	for range n {
		a := await(t, delivered, 30*time.Second)
		due, ok := dues[a.msg.UUID]
		require.True(t, ok)
		require.False(t, a.at.Before(due), "delivered %s before due", due.Sub(a.at))
	}

	claims.mu.Lock()
	defer claims.mu.Unlock()
	announced.mu.Lock()
	defer announced.mu.Unlock()
	ahead := 0
	for id, due := range dues {
		at, called := claims.at[id], claims.called[id]
		require.False(t, at.Before(due), "claimed at an instant before its due time")
		require.LessOrEqual(t, at.Sub(called), timeouts.DefaultClaimLease/8, "claimed further ahead than a fraction of the lease")
		if at.After(called) {
			ahead++
		}
		require.False(t, announced.at[id].Before(due), "announced %s before due", due.Sub(announced.at[id]))
	}
	require.Positive(t, ahead, "at least one of %d timeouts was claimed ahead of its due time", n)
}
