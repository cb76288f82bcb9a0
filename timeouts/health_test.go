package timeouts_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/faultstore"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// reasons lists the reasons of a Health error, nil when ready. It does not fail t: it runs in
// Eventually's goroutine too.
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
	require.Eventually(t, func() bool { return manager.Health() == nil }, 10*time.Second, 5*time.Millisecond,
		"ready once running: %v", manager.Health())

	require.NoError(t, router.Close())
	require.NoError(t, <-stopped)
	<-manager.Done()
	require.Equal(t, []string{"stopped"}, reasons(manager.Health()))
}

// While the store cannot be set up, the manager says so, and why, through the fetch breaker; it
// is ready once the store comes up.
func TestHealthStoreNotSetUp(t *testing.T) {
	t.Parallel()
	store := &unreadyStore{inner: memory.New()}
	b := setup(t, store, func(c *timeouts.Config) { c.RetryDelay = 10 * time.Millisecond })
	require.Eventually(t, func() bool { return store.attempts.Load() >= 2 }, 10*time.Second, 5*time.Millisecond)
	err := b.manager.Health()
	require.True(t, hasReason(err, "store not set up"), "%v", err)
	require.True(t, hasReason(err, "breaker fetch armed; last failure "), "%v", err)
	require.ErrorContains(t, err, "database starting up")

	store.up.Store(true)
	require.Eventually(t, func() bool { return b.manager.Health() == nil }, 10*time.Second, 5*time.Millisecond,
		"ready once set up: %v", b.manager.Health())
}

// A running manager whose store fails is not ready while its fetch breaker is armed, and ready
// again once the store recovers; an outage longer than the wait stops it, and Health says why.
func TestHealthStoreOutage(t *testing.T) {
	t.Parallel()
	store := faultstore.Wrap(memory.New())
	b := setup(t, store, func(c *timeouts.Config) {
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = 3 * time.Second
		c.RetryDelay = 50 * time.Millisecond
		c.PollInterval = 50 * time.Millisecond
	})
	require.Eventually(t, func() bool { return b.manager.Health() == nil }, 10*time.Second, 5*time.Millisecond)

	store.Fail()
	require.Eventually(t, func() bool { return b.manager.Health() != nil }, 10*time.Second, 5*time.Millisecond)
	err := b.manager.Health()
	require.Equal(t, 1, len(reasons(err)), "%v", err)
	require.True(t, hasReason(err, "breaker fetch armed; last failure "), "%v", err)
	require.ErrorIs(t, err, faultstore.ErrOutage)

	store.Recover()
	require.Eventually(t, func() bool { return b.manager.Health() == nil }, 10*time.Second, 5*time.Millisecond,
		"ready again once the store answers: %v", b.manager.Health())

	store.Fail()
	require.Eventually(t, b.router.IsClosed, 20*time.Second, 10*time.Millisecond)
	err = b.manager.Health()
	require.True(t, hasReason(err, "stopped: "), "%v", err)
	var ce *timeouts.CriticalError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "fetch", ce.Breaker)
}

// With OnCriticalError the router goes on; Health names the critical error without claiming the
// manager stopped.
func TestHealthCriticalErrorHandledByTheUser(t *testing.T) {
	t.Parallel()
	store := faultstore.Wrap(memory.New())
	rec := &criticalRecorder{}
	b := setup(t, store, func(c *timeouts.Config) {
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = 300 * time.Millisecond
		c.RetryDelay = 50 * time.Millisecond
		c.PollInterval = 50 * time.Millisecond
		c.OnCriticalError = rec.action
	})
	store.Fail()
	require.Eventually(t, func() bool { return rec.count() >= 1 }, 10*time.Second, 10*time.Millisecond)
	err := b.manager.Health()
	require.True(t, hasReason(err, "critical error: "), "%v", err)
	require.False(t, hasReason(err, "stopped"), "%v", err)
	require.False(t, b.router.IsClosed())
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
	store := &holdFailing{memStore: memory.New().(memStore)}
	store.fail.Store(true)
	r := run(t, newPubSub(t), store, "node-0", nil)
	require.Eventually(t, func() bool { return hasReason(r.manager.Health(), "breaker fetch armed") }, 10*time.Second, 5*time.Millisecond)
	err := r.manager.Health()
	require.True(t, hasReason(err, "instance name not held"), "%v", err)
	require.False(t, hasReason(err, "store not set up"), "%v", err)
	require.ErrorContains(t, err, "connection reset by peer")

	store.fail.Store(false)
	require.Eventually(t, func() bool { return r.manager.Health() == nil }, 10*time.Second, 5*time.Millisecond,
		"ready once the name is held: %v", r.manager.Health())
}

// A twin, refused because a running manager holds its name, is never ready and says why; the
// first stays ready.
func TestHealthTwinInstance(t *testing.T) {
	t.Parallel()
	store := memory.New().(memStore)
	twin := prepare(t, newPubSub(t), store, "twin", nil)
	first := run(t, newPubSub(t), store, "twin", nil)
	require.Eventually(t, func() bool { return first.manager.Health() == nil }, 10*time.Second, 5*time.Millisecond)

	twin.run(t)
	<-twin.manager.Done()
	err := twin.manager.Health()
	require.ErrorIs(t, err, persistence.ErrInstanceInUse)
	require.True(t, hasReason(err, "stopped: "), "%v", err)
	require.True(t, hasReason(err, "instance name not held"), "%v", err)
	require.Contains(t, err.Error(), `"twin"`)
	require.NoError(t, first.manager.Health())
}
