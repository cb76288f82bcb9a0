package timeouts_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// NewManager's check that its store was opened reads nothing the store's work writes: managers
// made and started on a store another manager is busy with race with nothing (run with -race),
// and every timeout is delivered by one of them. It runs on virtual time (testing/synctest); the
// goroutines still run side by side, for the race detector.
func TestManagersOnOneStoreSideBySideDoNotRace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		store := memory.New().(memStore)
		first, firstArrivals := setupSubscribed(t, store, "reminders", func(c *timeouts.Config) { c.PollInterval = 50 * time.Millisecond })
		arrivals := []<-chan arrival{firstArrivals}

		const n = 300
		var scheduling sync.WaitGroup
		scheduled := make(chan struct{}) // closed when the n timeouts are stored
		// The first manager writes the store all along: stores, claims, deletes.
		scheduling.Go(func() {
			defer close(scheduled)
			for i := range n {
				msg := message.NewMessage(watermill.NewUUID(), []byte("reminder"))
				timeouts.DeliverAfter(msg, time.Duration(i%10)*10*time.Millisecond)
				if _, err := first.manager.Schedule(ctx, "reminders", msg); err != nil {
					t.Errorf("scheduling %d: %v", i, err)
					return
				}
			}
		})
		// Meanwhile, managers are made on the store until every timeout is stored, and one starts.
		made := 0
		_, secondArrivals := setupSubscribed(t, store, "reminders", func(c *timeouts.Config) { c.PollInterval = 50 * time.Millisecond })
		arrivals = append(arrivals, secondArrivals)
		for waiting := true; waiting; made++ {
			_, err := timeouts.NewManager(timeouts.Config{
				Endpoint: endpoint, Store: store, Publisher: first.pubSub, Subscriber: first.pubSub,
			}, nil)
			require.NoError(t, err)
			select {
			case <-scheduled:
				waiting = false
			default:
			}
		}
		scheduling.Wait()
		t.Logf("%d managers made while the first stored %d timeouts", made, n)

		// Every timeout is delivered, at the latest when a claim whose announcement went astray is
		// claimed again, at the end of its lease (ClaimLease, a minute).
		delivered := map[string]bool{}
		deadline := time.After(90 * time.Second)
		for len(delivered) < n {
			select {
			case a := <-arrivals[0]:
				delivered[a.msg.UUID] = true
			case a := <-arrivals[1]:
				delivered[a.msg.UUID] = true
			case <-deadline:
				t.Fatalf("%d of %d timeouts delivered", len(delivered), n)
			}
		}
		synctest.Wait() // a timeout is removed once its message is delivered
		st, err := store.Stats(ctx, time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending, "nothing left behind")
	})
}

// userStore is a store of a user's own: it carries no mark of this module's stores.
type (
	userStore struct{ someStore }
	someStore = persistence.Store
)

// storeWrapper embeds one of the module's stores by pointer.
type (
	storeWrapper struct{ *innerSQLite }
	innerSQLite  = sqlite.Store
)

func TestStoresNeverOpenedAreRefusedWithoutReadingTheirFields(t *testing.T) {
	t.Parallel()
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubSub.Close()
	newManager := func(store persistence.Store) error {
		_, err := timeouts.NewManager(timeouts.Config{Endpoint: endpoint, Store: store, Publisher: pubSub, Subscriber: pubSub}, nil)
		return err
	}
	var nilSQLite *sqlite.Store
	for name, store := range map[string]persistence.Store{
		"nil sqlite":         nilSQLite,
		"zero sqlite":        &sqlite.Store{},
		"zero postgres":      &postgres.Store{},
		"zero mysql":         &mysql.Store{},
		"zero sqlserver":     &sqlserver.Store{},
		"wrapping nil":       storeWrapper{},
		"pointer to wrapper": &storeWrapper{},
	} {
		err := newManager(store)
		require.ErrorIs(t, err, timeouts.ErrInvalidConfig, name)
		require.ErrorContains(t, err, "Store is a nil or zero-value", name)
	}

	sqliteStore, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Endpoint: endpoint})
	require.NoError(t, err)
	defer sqliteStore.Close()
	for name, store := range map[string]persistence.Store{
		"memory":          memory.New(),
		"sqlite":          sqliteStore,
		"wrapping sqlite": storeWrapper{sqliteStore},
		"a user's store":  &userStore{memory.New()},
	} {
		require.NoError(t, newManager(store), name)
	}
}

// A store of the user's own, which carries no mark, still runs: the fallback refuses only nil.
func TestAUsersOwnStoreRuns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, &userStore{memory.New()}, nil)
		arrivals := subscribe(t, b.pubSub, "reminders")
		msg := message.NewMessage(watermill.NewUUID(), []byte("reminder"))
		timeouts.DeliverAfter(msg, 100*time.Millisecond)
		_, err := b.manager.Schedule(t.Context(), "reminders", msg)
		require.NoError(t, err)
		require.Equal(t, msg.UUID, await(t, arrivals, 10*time.Second).msg.UUID)
	})
}
