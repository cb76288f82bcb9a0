package timeouts

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/announce"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/storeclock"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/wire"
)

// pollerRig is a poller on the memory store and a GoChannel, with what it announced. Make it
// inside a synctest bubble: every wait is on fake time.
type pollerRig struct {
	store  persistence.Store
	poller *poller
	svc    *service

	mu        sync.Mutex
	announced map[string]time.Time // id: when its announcement arrived
}

const pollerEndpoint = "orders"

func newPollerRig(t *testing.T, interval time.Duration) *pollerRig {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	r := &pollerRig{store: memory.New(), announced: map[string]time.Time{}}
	r.svc = newService(func(context.Context) {}, nil)
	stop := newLifecycle(r.store, pubSub, r.svc, watermill.NopLogger{})
	newBreaker := func(name string) *breaker.CircuitBreaker {
		b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{Name: name, TimeToWait: time.Hour, Message: name,
			OnTrip: func(e *critical.Error) { t.Errorf("critical error: %v", e) }})
		require.NoError(t, err)
		t.Cleanup(b.Stop)
		return b
	}
	r.poller = &poller{
		store:      r.store,
		clock:      storeclock.New(storeclock.Config{Local: time.Now, Store: r.store}, nil),
		announcer:  announce.NewPublisher(pubSub, pollerEndpoint, 0, 0),
		interval:   interval,
		batch:      100,
		lease:      time.Minute,
		retryDelay: time.Second,
		fetch:      newBreaker("fetch"),
		dispatch:   newBreaker("dispatch"),
		stop:       stop,
		logger:     watermill.NopLogger{},
	}
	r.poller.init()

	msgs, err := pubSub.Subscribe(t.Context(), wire.DispatcherQueue(pollerEndpoint))
	require.NoError(t, err)
	go func() {
		for msg := range msgs {
			ids, err := dispatcherqueue.Decode(msg)
			require.NoError(t, err)
			r.mu.Lock()
			for _, id := range ids {
				r.announced[id] = time.Now()
			}
			r.mu.Unlock()
			msg.Ack()
		}
	}()
	return r
}

// run runs the poller until the test ends, or until the returned function stops it.
func (r *pollerRig) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.poller.run(ctx)
		r.poller.wait()
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

func (r *pollerRig) storeDue(t *testing.T, id string, due time.Time) {
	t.Helper()
	_, err := r.store.Store(context.Background(), persistence.Timeout{ID: id, Destination: "dest", Due: due})
	require.NoError(t, err)
}

func (r *pollerRig) announcedAt(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.announced[id]
	return at, ok
}

func TestPollerAnnouncesATimeoutWhenDueNeverBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPollerRig(t, time.Minute)
		due := time.Now().Add(10 * time.Second)
		r.storeDue(t, "t1", due)
		r.run(t)

		time.Sleep(9 * time.Second) // fake time: the poller sleeps until just before the due time
		synctest.Wait()
		_, ok := r.announcedAt("t1")
		require.False(t, ok, "announced a second before its due time")

		time.Sleep(time.Second)
		synctest.Wait()
		at, ok := r.announcedAt("t1")
		require.True(t, ok, "not announced at its due time")
		require.False(t, at.Before(due), "announced early")
	})
}

func TestPollerIsWokenForAnEarlierTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPollerRig(t, time.Hour)
		r.run(t)
		synctest.Wait() // the poller found nothing and sleeps for PollInterval

		due := time.Now().Add(time.Second)
		r.storeDue(t, "t1", due)
		r.poller.wake(due)
		time.Sleep(time.Second) // fake time
		synctest.Wait()
		at, ok := r.announcedAt("t1")
		require.True(t, ok, "the poller slept through a timeout stored while it slept")
		require.Equal(t, due, at)
	})
}

func TestPollerWakeForALaterTimeoutLetsItSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPollerRig(t, time.Minute)
		r.storeDue(t, "first", time.Now().Add(10*time.Second))
		r.run(t)
		synctest.Wait()
		planned := r.poller.plannedWake.Load()
		require.NotZero(t, planned, "the poller sleeps until the first due time")

		later := time.Now().Add(20 * time.Second)
		r.storeDue(t, "later", later)
		r.poller.wake(later)
		require.Empty(t, r.poller.wakeCh, "a later timeout does not wake the poller")
		require.Equal(t, planned, r.poller.plannedWake.Load())
	})
}

func TestPollerStoppedBeforeAnnouncingGivesTheClaimBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPollerRig(t, time.Minute)
		due := time.Now().Add(10 * time.Second)
		r.storeDue(t, "t1", due)
		stop := r.run(t)

		// The poller claims a little before the due time (ahead) and holds the claim until then.
		time.Sleep(10*time.Second - r.poller.ahead()/2) // fake time
		synctest.Wait()
		stop()
		_, ok := r.announcedAt("t1")
		require.False(t, ok)
		ids, err := r.store.ClaimDue(context.Background(), due, 10, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []string{"t1"}, ids, "the stop gave the claim back: claimable at once")
	})
}

// wrappedStore names the embedded store: a field named Store would hide the Store method.
type wrappedStore = persistence.Store

// countingStore counts the claims of the store it wraps.
type countingStore struct {
	wrappedStore
	mu     sync.Mutex
	claims int
}

func (s *countingStore) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	s.mu.Lock()
	s.claims++
	n := s.claims
	s.mu.Unlock()
	if n > 10_000 {
		<-ctx.Done() // a poller that never sleeps: block here so that fake time can go on
		return nil, ctx.Err()
	}
	return s.wrappedStore.ClaimDue(ctx, now, limit, lease)
}

func (s *countingStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims
}

// An idle poller whose PollInterval is shorter than how far ahead it claims still sleeps
// between looks; before, it planned each look already within reach and never slept.
func TestIdlePollerWithAShortPollIntervalSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		interval := 5 * time.Millisecond
		r := newPollerRig(t, interval)
		require.Less(t, interval, r.poller.ahead(), "the case under test: PollInterval shorter than ahead")
		store := &countingStore{wrappedStore: r.store}
		r.poller.store = store
		r.run(t)

		time.Sleep(time.Second) // fake time: about 200 looks
		synctest.Wait()
		looks := store.count()
		require.LessOrEqual(t, looks, 2*int(time.Second/interval), "an idle poller looked without sleeping")
		require.Greater(t, looks, int(time.Second/interval)/2, "an idle poller looks every PollInterval")

		due := time.Now().Add(50 * time.Millisecond)
		r.storeDue(t, "t1", due)
		time.Sleep(100 * time.Millisecond) // fake time: past the due time
		synctest.Wait()
		at, ok := r.announcedAt("t1")
		require.True(t, ok, "a timeout stored without a wake is found by the next look")
		require.False(t, at.Before(due), "announced early")
	})
}
