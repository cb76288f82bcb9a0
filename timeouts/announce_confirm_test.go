package timeouts_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// lateConfirmAnnouncements takes every announcement at once but confirms it only after confirmIn,
// as an overloaded broker does, and counts them.
type lateConfirmAnnouncements struct {
	message.Publisher
	confirmIn time.Duration
	announced *atomic.Int32
}

func (p lateConfirmAnnouncements) Publish(topic string, msgs ...*message.Message) error {
	if topic != wire.DispatcherQueue(endpoint) {
		return p.Publisher.Publish(topic, msgs...)
	}
	p.announced.Add(1)
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	select {
	case <-time.After(p.confirmIn): // fake time in the bubble: the confirm's delay
		return nil
	case <-msgs[0].Context().Done():
		return fmt.Errorf("waiting for the confirm: %w", msgs[0].Context().Err())
	}
}

func TestAnnouncementConfirmedAfterTheCallTimeoutIsNotAnnouncedAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var announced atomic.Int32
		b := setup(t, memory.New(), func(c *timeouts.Config) {
			c.CallTimeout = time.Second
			// Confirmed 3 s late: past the call timeout, within the dispatch breaker's wait.
			c.Publisher = lateConfirmAnnouncements{Publisher: c.Publisher, confirmIn: 3 * time.Second, announced: &announced}
		})
		delivered := subscribe(t, b.pubSub, "late")

		msg := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(msg, 100*time.Millisecond)
		require.NoError(t, b.manager.Publisher().Publish("late", msg))
		await(t, delivered, 10*time.Second)
		time.Sleep(10 * time.Second) // fake time: long past the confirm, and any retry it would have caused
		synctest.Wait()
		require.Equal(t, int32(1), announced.Load(), "announced once: a late confirm is not a failure")
		requireNoneQueued(t, delivered)
	})
}
