package timeouts_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/faultstore"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

func TestTimeToTriggerFetchCircuitBreakerIsTheOutageWaitUnderAnotherName(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		t.Cleanup(func() { _ = pubSub.Close() })
		_, err := timeouts.NewManager(timeouts.Config{
			Endpoint: endpoint, Store: memory.New(), Publisher: pubSub, Subscriber: pubSub,
			TimeToTriggerFetchCircuitBreaker:                        time.Minute,
			TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages: 2 * time.Minute,
		}, nil)
		require.ErrorIs(t, err, timeouts.ErrInvalidConfig)
		require.ErrorContains(t, err, "TimeToTriggerFetchCircuitBreaker (1m0s) and TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages (2m0s) name one setting")

		store := faultstore.Wrap(memory.New())
		rec := &criticalRecorder{}
		wait, poll := 400*time.Millisecond, 100*time.Millisecond
		setup(t, store, func(c *timeouts.Config) {
			c.TimeToTriggerFetchCircuitBreaker = wait
			c.PollInterval = poll
			c.OnCriticalError = rec.action
		})
		failedAt := time.Now()
		store.Fail()
		time.Sleep(wait + poll) // advances virtual time past the wait
		synctest.Wait()
		require.Equal(t, 1, rec.count())
		rec.mu.Lock()
		e, at := rec.errs[0], rec.at[0]
		rec.mu.Unlock()
		require.Equal(t, "fetch", e.Breaker)
		require.GreaterOrEqual(t, at.Sub(failedAt), wait, "the alias set the fetch breaker's wait")
		require.LessOrEqual(t, at.Sub(failedAt), wait+poll, "the alias set the fetch breaker's wait")
	})
}

func TestRecordingFailuresFasterThanAllowedRaisesACriticalErrorAndKeepsTheMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		t.Cleanup(func() { _ = pubSub.Close() })
		store := &uncountableStore{innerStore: memory.New()}
		rec := &criticalRecorder{}
		b := start(t, pubSub, store, func(c *timeouts.Config) {
			c.Publisher = &failingDestination{Publisher: pubSub, topic: "broken"}
			c.RetryDelay = 5 * time.Millisecond // about 200 failures a second against a limit of 1
			c.OnCriticalError = rec.action
		})
		errs := subscribe(t, pubSub, "error")

		msg := message.NewMessage(watermill.NewUUID(), []byte("kept"))
		timeouts.DeliverAfter(msg, 50*time.Millisecond)
		require.NoError(t, b.manager.Publisher().Publish("broken", msg))

		time.Sleep(time.Second) // advances virtual time: about 200 failures
		synctest.Wait()
		require.Equal(t, 1, rec.count(), "once per window")
		rec.mu.Lock()
		e := rec.errs[0]
		rec.mu.Unlock()
		require.Equal(t, "recovery", e.Breaker)
		require.Equal(t, "Failed to execute error handling for delayed message forwarding", e.Message)
		require.ErrorIs(t, e, errNotCounted)
		require.ErrorIs(t, b.manager.Err(), errNotCounted)

		requireNothing(t, errs, 300*time.Millisecond)
		kept, err := store.Peek(context.Background(), msg.UUID)
		require.NoError(t, err, "the timeout is neither lost nor moved to the error queue")
		require.Equal(t, "kept", string(kept.Payload))
	})
}

var errNotCounted = errors.New("failure count could not be written")

// innerStore names the embedded store: a field named Store would hide the Store method.
type innerStore = persistence.Store

// uncountableStore cannot record failed forwarding attempts.
type uncountableStore struct{ innerStore }

func (s *uncountableStore) IncrementFailureCount(context.Context, string) (bool, error) {
	return false, errNotCounted
}
