package timeouts_test

import (
	"context"

	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// oversizeLimit is the largest payload sizeLimited publishes.
const oversizeLimit = 1 << 10

// sizeLimited refuses, on every topic, a message larger than oversizeLimit, as a broker with a
// maximum message size does.
type sizeLimited struct{ message.Publisher }

func (p sizeLimited) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if len(m.Payload) > oversizeLimit {
			return fmt.Errorf("message %s of %d bytes is larger than the %d the broker takes", m.UUID, len(m.Payload), oversizeLimit)
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

func TestUnforwardableTimeoutIsParkedShownAndReplayed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		t.Cleanup(func() { _ = pubSub.Close() })
		reg := prometheus.NewPedanticRegistry()
		b := start(t, pubSub, memory.New(), func(c *timeouts.Config) {
			c.Publisher = sizeLimited{pubSub}
			c.MetricsRegisterer = reg
		})
		delivered := subscribe(t, pubSub, "orders-out")
		ctx := context.Background()

		big := message.NewMessage(watermill.NewUUID(), make([]byte, oversizeLimit+1))
		_, err := b.manager.Schedule(ctx, "orders-out", big)
		require.NoError(t, err)
		small := message.NewMessage(watermill.NewUUID(), []byte("small"))
		_, err = b.manager.Schedule(ctx, "orders-out", small)
		require.NoError(t, err)
		require.Equal(t, small.UUID, await(t, delivered, 10*time.Second).msg.UUID)

		synctest.Wait() // the refused forward and error-queue copy are handled
		parked, err := b.manager.Get(ctx, big.UUID)
		require.NoError(t, err)
		require.NotEmpty(t, parked.Parked, "parked")
		require.Contains(t, parked.Parked, "larger than the 1024 the broker takes")
		require.Contains(t, parked.Parked, `the error queue "error" refused its copy too`)
		list, err := b.manager.List(ctx, persistence.ListOptions{Parked: true})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, big.UUID, list[0].ID)
		require.Equal(t, parked.Parked, list[0].Parked)
		st, err := b.manager.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, st.Parked)
		require.Equal(t, uint64(1), b.manager.Activity().Parked)
		require.NoError(t, b.manager.Err(), "no critical error")
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP timeoutmill_timeouts_parked Parked timeouts in the store, waiting for an operator (-1 when the store cannot be read).
# TYPE timeoutmill_timeouts_parked gauge
timeoutmill_timeouts_parked{endpoint="orders"} 1
# HELP timeoutmill_timeouts_parked_total Timeouts parked: their forward and their error-queue copy were both refused.
# TYPE timeoutmill_timeouts_parked_total counter
timeoutmill_timeouts_parked_total{endpoint="orders"} 1
`), "timeoutmill_timeouts_parked", "timeoutmill_timeouts_parked_total"))

		// Replayed, it is tried again at once, and parks again: the broker still refuses it.
		n, err := b.manager.Unpark(ctx, big.UUID, "not-stored")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		synctest.Wait() // the replay is tried and refused
		require.Equal(t, uint64(2), b.manager.Activity().Parked, "parked again")
		again, err := b.manager.Get(ctx, big.UUID)
		require.NoError(t, err)
		require.Contains(t, again.Parked, "after 1 attempt:", "the replay starts its attempts afresh")

		n, err = b.manager.DeleteParked(ctx, small.UUID, big.UUID)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the parked one is deleted; the delivered one is not stored")
		_, err = b.manager.Get(ctx, big.UUID)
		require.ErrorIs(t, err, persistence.ErrNotFound)
		require.NoError(t, b.manager.Err())
	})
}

// storeIface names the embedded store: a field named Store would hide the Store method.
type storeIface = persistence.Store

// plainStore is a store with none of the optional interfaces.
type plainStore struct{ storeIface }

func TestUnparkAndDeleteParkedNeedAParker(t *testing.T) {
	t.Parallel()
	for name, call := range map[string]func(m *timeouts.Manager, ids ...string) (int, error){
		"Unpark": func(m *timeouts.Manager, ids ...string) (int, error) { return m.Unpark(context.Background(), ids...) },
		"DeleteParked": func(m *timeouts.Manager, ids ...string) (int, error) {
			return m.DeleteParked(context.Background(), ids...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, plainStore{memory.New()}, nil)
			_, err := call(b.manager, "id-1")
			require.ErrorIs(t, err, persistence.ErrUnsupported)

			b = setup(t, memory.New(), nil)
			_, err = call(b.manager, "")
			require.ErrorIs(t, err, persistence.ErrInvalidTimeout)
			n, err := call(b.manager)
			require.NoError(t, err)
			require.Zero(t, n)
		})
	}
}
