package timeouts_test

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// refusedAnnouncements runs a manager whose dispatcher queue refuses every announcement (a broker
// restart) until accept, with an hour-long lease and a 2 s dispatch breaker.
func refusedAnnouncements(t *testing.T) (*testBundle, *refusingQueue, *criticalRecorder) {
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	refusing := &refusingQueue{Publisher: pubSub, topic: wire.DispatcherQueue(endpoint), refuse: true}
	rec := &criticalRecorder{}
	b := start(t, pubSub, memory.New(), func(c *timeouts.Config) {
		c.Publisher = refusing
		c.ClaimLease = time.Hour
		c.RetryDelay = 50 * time.Millisecond
		c.TimeToTriggerDispatchCircuitBreaker = 2 * time.Second
		c.OnCriticalError = rec.action
	})
	return b, refusing, rec
}

func publishDueSoon(t *testing.T, b *testBundle) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte("due soon"))
	timeouts.DeliverAfter(msg, 50*time.Millisecond)
	require.NoError(t, b.manager.Publisher().Publish("dest", msg))
	return msg
}

// TestFailedAnnouncementIsRetriedBeforeItsLeaseRunsOut: the claimed ids are announced again once
// the queue takes them, not an hour-long lease later, and the outage raises no critical error.
func TestFailedAnnouncementIsRetriedBeforeItsLeaseRunsOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, refusing, rec := refusedAnnouncements(t)
		delivered := subscribe(t, b.pubSub, "dest")

		msg := publishDueSoon(t, b)
		time.Sleep(300 * time.Millisecond) // advances virtual time: due, and a few retries later
		synctest.Wait()
		require.GreaterOrEqual(t, refusing.refused(), 3, "the poller keeps trying to announce")
		requireNothing(t, delivered, 100*time.Millisecond)
		refusing.accept()

		require.Equal(t, msg.UUID, await(t, delivered, 10*time.Second).msg.UUID, "announced once the queue takes it")
		time.Sleep(3 * time.Second) // advances virtual time past the dispatch breaker's wait
		synctest.Wait()
		require.Zero(t, rec.count(), "an outage shorter than the dispatch breaker's wait is no critical error")
		require.NoError(t, b.manager.Err())
	})
}

// TestAnnouncementThatGetsThroughDisarmsTheDispatchBreaker: the timeout is cancelled while its
// announcement is refused, so once announced nothing is forwarded. The announcement itself must
// disarm the breaker its failures armed, or a quiet endpoint raises a critical error for an
// outage that is over.
func TestAnnouncementThatGetsThroughDisarmsTheDispatchBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, refusing, rec := refusedAnnouncements(t)
		delivered := subscribe(t, b.pubSub, "dest")

		msg := publishDueSoon(t, b)
		time.Sleep(300 * time.Millisecond) // advances virtual time: due, and a few retries later
		synctest.Wait()
		require.GreaterOrEqual(t, refusing.refused(), 3, "the poller keeps trying to announce")
		found, err := b.store.Cancel(t.Context(), msg.UUID)
		require.NoError(t, err)
		require.True(t, found)
		refusing.accept()

		time.Sleep(100 * time.Millisecond) // advances virtual time by two retry delays
		synctest.Wait()
		require.Positive(t, refusing.accepted(), "the claimed id is announced once the queue takes it")
		time.Sleep(3 * time.Second) // advances virtual time past the dispatch breaker's wait
		synctest.Wait()
		require.Zero(t, rec.count(), "the announcement that got through disarmed the dispatch breaker")
		require.NoError(t, b.manager.Err())
		requireNothing(t, delivered, 10*time.Millisecond)
	})
}

// refusingQueue refuses every publish to one topic until accept is called.
type refusingQueue struct {
	message.Publisher
	topic  string
	mu     sync.Mutex
	refuse bool
	n      int // refused publishes to topic
	ok     int // accepted publishes to topic
}

func (r *refusingQueue) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	refuse := r.refuse && topic == r.topic
	if refuse {
		r.n++
	} else if topic == r.topic {
		r.ok++
	}
	r.mu.Unlock()
	if refuse {
		return errors.New("not connected to the broker")
	}
	return r.Publisher.Publish(topic, msgs...)
}

func (r *refusingQueue) refused() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *refusingQueue) accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok
}

func (r *refusingQueue) accept() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = false
}
