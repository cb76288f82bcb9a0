package timeouts_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/persistence"
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

// announcementRecorder records when each id was announced on the dispatcher queue, and the due
// time its announcement carried. Wrapping a GoChannel, it is a Publisher the manager takes for a
// broker's.
type announcementRecorder struct {
	message.Publisher
	topic string
	mu    sync.Mutex
	at    map[string]time.Time
	dueBy map[string]time.Time
	// confirm, when set, makes Publish to topic take that long, as a broker's confirm does.
	confirm time.Duration
}

func (a *announcementRecorder) Publish(topic string, msgs ...*message.Message) error {
	if topic == a.topic {
		now := time.Now()
		a.mu.Lock()
		for _, m := range msgs {
			ids, err := dispatcherqueue.Decode(m)
			dueBy, _, err2 := dispatcherqueue.DueBy(m)
			if err == nil && err2 == nil {
				for _, id := range ids {
					a.at[id], a.dueBy[id] = now, dueBy
				}
			}
		}
		a.mu.Unlock()
	}
	if topic == a.topic && a.confirm > 0 {
		time.Sleep(a.confirm) // in a synctest bubble: advances virtual time by the confirm's round trip
	}
	return a.Publisher.Publish(topic, msgs...)
}

// onBroker runs a manager on a stand-in for a broker: a GoChannel whose Publish returns once the
// messages are handed over, as a broker's confirm does, not once they are handled, and which the
// manager does not take for a GoChannel. In a synctest bubble it must be so: a Publish waiting
// for a handler that waits for virtual time holds GoChannel's topic lock, and a goroutine waiting
// on a lock stops virtual time.
func onBroker(t *testing.T, store persistence.Store, mutate func(*timeouts.Config)) *testBundle {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	return start(t, pubSub, store, func(c *timeouts.Config) {
		c.Publisher = struct{ message.Publisher }{pubSub}
		if mutate != nil {
			mutate(c)
		}
	})
}

// dueStream publishes n timeouts due one after another, 50 ms apart, as a steady stream is, and
// returns their due times by id.
func dueStream(t *testing.T, b *testBundle, n int) map[string]time.Time {
	t.Helper()
	dues := map[string]time.Time{}
	start := time.Now().Add(300 * time.Millisecond)
	for i := range n {
		msg := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		due := start.Add(time.Duration(i) * 50 * time.Millisecond)
		timeouts.DeliverAt(msg, due)
		dues[msg.UUID] = due
		require.NoError(t, b.manager.Publisher().Publish("dest", msg))
	}
	return dues
}

// requireDeliveredNotBeforeDue waits for every timeout of dues and checks none came early.
func requireDeliveredNotBeforeDue(t *testing.T, delivered <-chan arrival, dues map[string]time.Time) {
	t.Helper()
	for range dues {
		a := await(t, delivered, 30*time.Second)
		due, ok := dues[a.msg.UUID]
		require.True(t, ok)
		require.False(t, a.at.Before(due), "delivered %s before due", due.Sub(a.at))
	}
}

// TestClaimedAheadAnnouncedAheadWithTheirDueTime: on a broker the poller claims a timeout shortly
// before it is due and announces it a little ahead too, saying when it is due; the dispatch
// satellite holds the announcement until then, so nothing is delivered early. It claims no
// further ahead than a fraction of the lease.
func TestClaimedAheadAnnouncedAheadWithTheirDueTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		claims := &claimRecorder{inner: memory.New(), called: map[string]time.Time{}, at: map[string]time.Time{}}
		var announced *announcementRecorder
		b := onBroker(t, claims, func(c *timeouts.Config) {
			announced = &announcementRecorder{Publisher: c.Publisher, topic: wire.DispatcherQueue(endpoint),
				at: map[string]time.Time{}, dueBy: map[string]time.Time{}}
			c.Publisher = announced
		})
		delivered := subscribe(t, b.pubSub, "dest")
		dues := dueStream(t, b, 20)
		requireDeliveredNotBeforeDue(t, delivered, dues)

		claims.mu.Lock()
		defer claims.mu.Unlock()
		announced.mu.Lock()
		defer announced.mu.Unlock()
		claimedAhead, announcedAhead := 0, 0
		for id, due := range dues {
			at, called := claims.at[id], claims.called[id]
			require.False(t, at.Before(due), "claimed at an instant before its due time")
			require.LessOrEqual(t, at.Sub(called), timeouts.DefaultClaimLease/8, "claimed further ahead than a fraction of the lease")
			if at.After(called) {
				claimedAhead++
			}
			if announced.at[id].Before(due) {
				announcedAhead++
				require.False(t, announced.dueBy[id].Before(due), "announced ahead, saying it is due by %s, %s before it is",
					announced.dueBy[id], due.Sub(announced.dueBy[id]))
			}
		}
		require.Positive(t, claimedAhead, "at least one of %d timeouts was claimed ahead of its due time", len(dues))
		require.Positive(t, announcedAhead, "at least one of %d timeouts was announced ahead of its due time", len(dues))
	})
}

// TestOnGoChannelClaimedAheadAnnouncedAtDue: on an in-process GoChannel, whose Publish waits until
// the announcement is handled, the poller claims ahead but announces only once due.
func TestOnGoChannelClaimedAheadAnnouncedAtDue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		delivered := subscribe(t, b.pubSub, "dest")
		announcements := subscribe(t, b.pubSub, wire.DispatcherQueue(endpoint)) // a second subscriber sees each
		dues := dueStream(t, b, 20)
		requireDeliveredNotBeforeDue(t, delivered, dues)
		for seen := 0; seen < len(dues); {
			a := await(t, announcements, 10*time.Second)
			ids, err := dispatcherqueue.Decode(a.msg)
			require.NoError(t, err)
			for _, id := range ids {
				if due, ok := dues[id]; ok {
					require.False(t, a.at.Before(due), "announced %s before due", due.Sub(a.at))
					seen++
				}
			}
		}
	})
}

// TestSteadyStreamWithSlowClaimsAndConfirmsIsAnnouncedAhead: a stream whose due times are closer
// together than the announcement's lead, on a store whose claims take a round trip and a broker
// whose confirms take longer, is claimed and announced a lead ahead, each announcement saying its
// due time, and delivered never early.
func TestSteadyStreamWithSlowClaimsAndConfirmsIsAnnouncedAhead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var announced *announcementRecorder
		claims := &slowClaims{inner: memory.New(), delay: time.Millisecond}
		b := onBroker(t, claims, func(c *timeouts.Config) {
			announced = &announcementRecorder{Publisher: c.Publisher, topic: wire.DispatcherQueue(endpoint),
				at: map[string]time.Time{}, dueBy: map[string]time.Time{}, confirm: 4 * time.Millisecond}
			c.Publisher = announced
		})
		delivered := subscribe(t, b.pubSub, "dest")
		dues := map[string]time.Time{}
		start := time.Now().Add(500 * time.Millisecond)
		for i := range 80 {
			msg := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
			due := start.Add(time.Duration(i) * 3 * time.Millisecond)
			timeouts.DeliverAt(msg, due)
			dues[msg.UUID] = due
			require.NoError(t, b.manager.Publisher().Publish("dest", msg))
		}
		requireDeliveredNotBeforeDue(t, delivered, dues)

		announced.mu.Lock()
		defer announced.mu.Unlock()
		ahead := 0
		for id, due := range dues {
			by := announced.dueBy[id]
			require.False(t, !by.IsZero() && by.Before(due), "said due by %s, before its due time", by)
			if !by.IsZero() && due.Sub(announced.at[id]) >= 10*time.Millisecond {
				ahead++
			}
		}
		t.Logf("%d of %d announced 10 ms or more ahead, with their due time", ahead, len(dues))
		// How many depends on the poller's lead: that some are shows the stream is not announced at
		// its due times only.
		require.Positive(t, ahead, "announced well ahead, with their due time")
	})
}

// slowClaims makes each claim take at least delay, as a database's round trip does.
type slowClaims struct {
	inner
	delay time.Duration
}

func (s *slowClaims) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	time.Sleep(s.delay) // in a synctest bubble: advances virtual time by the round trip
	return s.inner.ClaimDue(ctx, now, limit, lease)
}

// announcedSizes publishes n timeouts due together shortly, waits for all of them, and returns
// how many ids each announcement the recorder saw carried.
func announcedSizes(t *testing.T, b *testBundle, n int, announcements <-chan arrival) []int {
	t.Helper()
	delivered := subscribe(t, b.pubSub, "dest")
	// Far enough ahead that all n are stored before the poller claims any: the claim must see
	// them together.
	due := time.Now().Add(5 * time.Second)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAt(msgs[i], due)
	}
	require.NoError(t, b.manager.Publisher().Publish("dest", msgs...))
	require.Greater(t, time.Until(due), time.Second, "all %d were to be stored well before their due time, when the poller claims them", n)
	for range n {
		await(t, delivered, 30*time.Second)
	}
	var sizes []int
	for seen := 0; seen < n; {
		ids, err := dispatcherqueue.Decode(await(t, announcements, 10*time.Second).msg)
		require.NoError(t, err)
		sizes = append(sizes, len(ids))
		seen += len(ids)
	}
	return sizes
}

// TestOnGoChannelAClaimIsAnnouncedInOneMessage: GoChannel hands the dispatch satellite one message
// at a time, so by default a claim takes as many ids as MaxIDsPerMessage allows and is announced
// in one message, whose ids are then dispatched in batches side by side; on a broker, a claim
// takes DefaultClaimBatchSize ids and is announced in messages of at most DefaultAnnouncementIDs
// ids, which competing consumers share.
func TestOnGoChannelAClaimIsAnnouncedInOneMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n = 800 // due together: above DefaultClaimBatchSize, at most MaxIDsPerMessage
		b := setup(t, memory.New(), nil)
		sizes := announcedSizes(t, b, n, subscribe(t, b.pubSub, wire.DispatcherQueue(endpoint)))
		require.Greater(t, slices.Max(sizes), timeouts.DefaultClaimBatchSize,
			"%d ids due together on GoChannel were announced in messages of %v ids", n, sizes)

		broker := onBroker(t, memory.New(), nil)
		sizes = announcedSizes(t, broker, n, subscribe(t, broker.pubSub, wire.DispatcherQueue(endpoint)))
		require.LessOrEqual(t, slices.Max(sizes), timeouts.DefaultAnnouncementIDs, "on a broker: messages of %v ids", sizes)
	})
}
