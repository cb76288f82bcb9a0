package timeouts_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/faultstore"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// The health tests run in a synctest bubble on the memory store and a GoChannel: time is virtual,
// a sleep advances it, and synctest.Wait lets every goroutine settle before Health is read.

// reasons lists the reasons of a Health error, nil when ready.
func reasons(err error) []string {
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []string{"not joined: " + err.Error()}
	}
	var out []string
	for _, e := range joined.Unwrap() {
		out = append(out, e.Error())
	}
	return out
}

// hasReason reports whether one of err's reasons begins with prefix.
func hasReason(err error, prefix string) bool {
	for _, r := range reasons(err) {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}

// A manager is not ready before it is added to a router and started, is ready once it runs, and
// says it stopped once its router closed.
func TestHealthFromStartToStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pubSub := newPubSub(t)
		manager, err := timeouts.NewManager(timeouts.Config{Endpoint: endpoint, Store: memory.New(), Publisher: pubSub, Subscriber: pubSub}, nil)
		require.NoError(t, err)
		err = manager.Health()
		require.Equal(t, []string{"not added to a router", "store not set up"}, reasons(err))
		require.Equal(t, "not added to a router\nstore not set up", err.Error(), "one reason a line")

		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		require.NoError(t, err)
		require.NoError(t, manager.AddToRouter(router))
		require.Equal(t, []string{"satellites not subscribed", "store not set up"}, reasons(manager.Health()))

		stopped := make(chan error, 1)
		go func() { stopped <- router.Run(context.Background()) }()
		synctest.Wait()
		require.NoError(t, manager.Health(), "ready once running")

		require.NoError(t, router.Close())
		require.NoError(t, <-stopped)
		<-manager.Done()
		require.Equal(t, []string{"stopped"}, reasons(manager.Health()))
	})
}

// While the store cannot be set up, the manager says so, and why, through the fetch breaker; it
// is ready once the store comes up.
func TestHealthStoreNotSetUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &unreadyStore{inner: memory.New()}
		b := setup(t, store, func(c *timeouts.Config) { c.RetryDelay = 10 * time.Millisecond })
		time.Sleep(10 * time.Millisecond) // advances virtual time by a retry delay
		synctest.Wait()
		require.GreaterOrEqual(t, store.attempts.Load(), int32(2), "tried again after the retry delay")
		err := b.manager.Health()
		require.True(t, hasReason(err, "store not set up"), "%v", err)
		require.True(t, hasReason(err, "breaker fetch armed; last failure "), "%v", err)
		require.ErrorContains(t, err, "database starting up")

		store.up.Store(true)
		time.Sleep(10 * time.Millisecond) // advances virtual time to the next try
		synctest.Wait()
		require.NoError(t, b.manager.Health(), "ready once set up")
	})
}

// A running manager whose store fails is not ready while its fetch breaker is armed, and ready
// again once the store recovers; an outage longer than the wait stops it, and Health says why.
func TestHealthStoreOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.Wrap(memory.New())
		b := setup(t, store, func(c *timeouts.Config) {
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = 3 * time.Second
			c.RetryDelay = 50 * time.Millisecond
			c.PollInterval = 50 * time.Millisecond
		})
		synctest.Wait()
		require.NoError(t, b.manager.Health())

		store.Fail()
		time.Sleep(50 * time.Millisecond) // advances virtual time by a poll interval
		synctest.Wait()
		err := b.manager.Health()
		require.Equal(t, 1, len(reasons(err)), "%v", err)
		require.True(t, hasReason(err, "breaker fetch armed; last failure "), "%v", err)
		require.ErrorIs(t, err, faultstore.ErrOutage)

		store.Recover()
		time.Sleep(50 * time.Millisecond) // advances virtual time by a retry delay
		synctest.Wait()
		require.NoError(t, b.manager.Health(), "ready again once the store answers")

		store.Fail()
		time.Sleep(3*time.Second + 50*time.Millisecond) // advances virtual time past the wait
		synctest.Wait()
		require.True(t, b.router.IsClosed(), "an outage longer than the wait closes the router")
		err = b.manager.Health()
		require.True(t, hasReason(err, "stopped: "), "%v", err)
		var ce *timeouts.CriticalError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "fetch", ce.Breaker)
	})
}

// With OnCriticalError the router goes on; Health names the critical error without claiming the
// manager stopped.
func TestHealthCriticalErrorHandledByTheUser(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.Wrap(memory.New())
		rec := &criticalRecorder{}
		b := setup(t, store, func(c *timeouts.Config) {
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = 300 * time.Millisecond
			c.RetryDelay = 50 * time.Millisecond
			c.PollInterval = 50 * time.Millisecond
			c.OnCriticalError = rec.action
		})
		store.Fail()
		time.Sleep(350 * time.Millisecond) // advances virtual time past the wait
		synctest.Wait()
		require.Equal(t, 1, rec.count())
		err := b.manager.Health()
		require.True(t, hasReason(err, "critical error: "), "%v", err)
		require.False(t, hasReason(err, "stopped"), "%v", err)
		require.False(t, b.router.IsClosed())
	})
}

// holdFailing is a memory store whose HoldInstance fails, as a database that drops the
// connection would, while fail is set.
type holdFailing struct {
	memStore
	fail atomic.Bool
}

func (s *holdFailing) HoldInstance(ctx context.Context, instance string) (func() error, error) {
	if s.fail.Load() {
		return nil, errors.New("connection reset by peer")
	}
	return s.memStore.HoldInstance(ctx, instance)
}

// A manager that cannot take its instance name yet says so; once it has, it is ready.
func TestHealthInstanceNameNotHeld(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &holdFailing{memStore: memory.New().(memStore)}
		store.fail.Store(true)
		r := run(t, newPubSub(t), store, "node-0", nil)
		synctest.Wait()
		err := r.manager.Health()
		require.True(t, hasReason(err, "breaker fetch armed"), "%v", err)
		require.True(t, hasReason(err, "instance name not held"), "%v", err)
		require.False(t, hasReason(err, "store not set up"), "%v", err)
		require.ErrorContains(t, err, "connection reset by peer")

		store.fail.Store(false)
		time.Sleep(100 * time.Millisecond) // advances virtual time past the next try
		synctest.Wait()
		require.NoError(t, r.manager.Health(), "ready once the name is held")
	})
}

// A twin, refused because a running manager holds its name, is never ready and says why; the
// first stays ready.
func TestHealthTwinInstance(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := memory.New().(memStore)
		twin := prepare(t, newPubSub(t), store, "twin", nil)
		first := run(t, newPubSub(t), store, "twin", nil)
		synctest.Wait()
		require.NoError(t, first.manager.Health())

		twin.run(t)
		<-twin.manager.Done()
		err := twin.manager.Health()
		require.ErrorIs(t, err, persistence.ErrInstanceInUse)
		require.True(t, hasReason(err, "stopped: "), "%v", err)
		require.True(t, hasReason(err, "instance name not held"), "%v", err)
		require.Contains(t, err.Error(), `"twin"`)
		require.NoError(t, first.manager.Health())
	})
}

// Health measures how long ago the last failure was on the manager's clock (Config.Clock), not the
// system's: a clock set 10 s on makes the failure 10 s old.
func TestHealthReadsTheManagersClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.Wrap(memory.New())
		clock := &skewedClock{}
		b := setup(t, store, func(c *timeouts.Config) {
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = time.Hour
			c.RetryDelay = time.Minute // one failure, then a long wait before the next
			c.PollInterval = 50 * time.Millisecond
			c.Clock = clock
		})
		synctest.Wait()
		store.Fail()
		time.Sleep(50 * time.Millisecond) // advances virtual time by a poll interval: one failure
		synctest.Wait()
		require.True(t, hasReason(b.manager.Health(), "breaker fetch armed; last failure 0s ago: "), "%v", b.manager.Health())
		clock.set(10 * time.Second)
		require.True(t, hasReason(b.manager.Health(), "breaker fetch armed; last failure 10s ago: "), "%v", b.manager.Health())
	})
}
