package timeouts_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// claimCounter counts the claims of each id.
type claimCounter struct {
	inner
	mu sync.Mutex
	n  map[string]int
}

func (c *claimCounter) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	ids, err := c.inner.ClaimDue(ctx, now, limit, lease)
	c.mu.Lock()
	for _, id := range ids {
		c.n[id]++
	}
	c.mu.Unlock()
	return ids, err
}

// slowForwards makes each Publish to topic take delay, as a loaded broker's confirm does.
type slowForwards struct {
	message.Publisher
	topic string
	delay time.Duration
}

func (s slowForwards) Publish(topic string, msgs ...*message.Message) error {
	if topic == s.topic {
		time.Sleep(s.delay) // in a synctest bubble: advances virtual time by the confirm's round trip
	}
	return s.Publisher.Publish(topic, msgs...)
}

// TestABacklogLongerToDispatchThanTheLeaseIsClaimedOnce: a backlog that takes twice the claim
// lease to forward waits in the store until the dispatch satellite is ready for it, instead of on
// the dispatcher queue while its lease runs out. Claimed all at once, the ids still queued when
// the lease ran out would be claimed and announced again: work that slows the drain, and
// duplicates when two instances forward one id at once.
func TestABacklogLongerToDispatchThanTheLeaseIsClaimedOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const size = 30000
		lease := 3 * time.Second
		store := memory.New()
		due := time.Now().Add(time.Second)
		ts := make([]persistence.Timeout, size)
		for i := range ts {
			ts[i] = persistence.Timeout{ID: "backlog-" + strconv.Itoa(i), Destination: "dest", Due: due, Payload: []byte("x")}
		}
		_, err := store.(persistence.BatchStore).StoreMany(t.Context(), ts)
		require.NoError(t, err)
		claims := &claimCounter{inner: store, n: map[string]int{}}
		b := onBroker(t, claims, func(c *timeouts.Config) {
			c.ClaimLease = lease
			// Each forward (a batch of up to 256) takes 500 ms: the backlog takes several leases.
			c.Publisher = slowForwards{Publisher: c.Publisher, topic: "dest", delay: 500 * time.Millisecond}
		})
		delivered := subscribe(t, b.pubSub, "dest")

		seen := map[string]int{}
		var last time.Time
		for range size {
			a := await(t, delivered, 30*time.Second)
			seen[a.msg.UUID]++
			last = a.at
		}
		require.Len(t, seen, size)
		require.Greater(t, last.Sub(due), lease, "the backlog took longer than the lease to forward, as the test means")

		claims.mu.Lock()
		defer claims.mu.Unlock()
		again := 0
		for _, n := range claims.n {
			if n > 1 {
				again++
			}
		}
		require.Len(t, claims.n, size)
		require.Zero(t, again, "ids claimed again after their lease ran out on the dispatcher queue")
	})
}
