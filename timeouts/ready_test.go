package timeouts_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// inner is persistence.Store under a name that does not clash with its Store method.
type inner = persistence.Store

// unreadyStore is a store whose SetupInfrastructure fails until the database "comes up".
type unreadyStore struct {
	inner
	up       atomic.Bool
	attempts atomic.Int32
}

func (s *unreadyStore) SetupInfrastructure(context.Context) error {
	s.attempts.Add(1)
	if !s.up.Load() {
		return errors.New("database starting up")
	}
	return nil
}

// TestReadyWaitsForTheStoreToBeSetUp: Ready stays open while the manager cannot create the
// store's tables (it keeps trying), and closes once it has, with the router already running.
func TestReadyWaitsForTheStoreToBeSetUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &unreadyStore{inner: memory.New()}
		b := setup(t, store, func(c *timeouts.Config) { c.RetryDelay = 10 * time.Millisecond })
		time.Sleep(time.Second) // fake time: the manager retries meanwhile
		require.GreaterOrEqual(t, store.attempts.Load(), int32(3), "the manager keeps trying to set the store up")
		select {
		case <-b.manager.Ready():
			t.Fatal("ready before the store was set up")
		default:
		}
		store.up.Store(true)
		time.Sleep(time.Second) // fake time: the next attempt succeeds
		select {
		case <-b.manager.Ready():
		default:
			t.Fatal("not ready once the store could be set up")
		}
	})
}

// TestReadyAtOnceWithoutSetUp: a store with nothing to set up is ready as soon as the router
// started the manager.
func TestReadyAtOnceWithoutSetUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		synctest.Wait()
		select {
		case <-b.manager.Ready():
		default:
			t.Fatal("not ready")
		}
	})
}
