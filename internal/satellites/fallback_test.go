package satellites_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
)

// plainStore has only the calls of persistence.Store: the satellites fall back to one call per
// timeout for its batches.
type plainStore struct{ innerStore }

// A store without batch calls stores a batch one timeout at a time.
// Each is stored once; a redelivery among them is acked; the poller hears of each new one once.
func TestStoreWithoutBatchCallsStoresEachOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		published := &recordingPublisher{}
		plain := plainStore{memory.New()}
		_, batches := any(plain).(persistence.BatchStore)
		require.False(t, batches, "the store must lack batch calls for this test")
		var mu sync.Mutex
		woken := 0
		s := storeSatelliteOn(t, plain, published, func(time.Time) { mu.Lock(); woken++; mu.Unlock() })
		due := time.Now().Add(time.Hour)
		var msgs []*message.Message
		for i := range 30 {
			msgs = append(msgs, delayedMessage(fmt.Sprintf("m-%d", i), "payments", due))
		}
		for _, err := range handleConcurrently(s, append(msgs, msgs[:5]...)) {
			require.NoError(t, err)
		}
		st, err := plain.innerStore.(persistence.Inspector).Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Equal(t, 30, st.Pending)
		require.Equal(t, 30, woken)
	})
}

// A store without batch calls looks up and removes a batch one timeout at a time.
// A missing id is skipped and acked; each found one is forwarded once and removed.
func TestDispatchWithoutBatchCallsForwardsEachOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDispatch(t, nil) // its brokenStore has only persistence.Store's calls
		var ids []string
		for range 10 {
			ids = append(ids, b.storeDue(t, "payments").ID)
		}
		require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(append(ids, "gone")...)))
		requireEachOnce(t, b.published.to("payments"), ids)
		for _, id := range ids {
			_, err := b.store.Peek(context.Background(), id)
			require.ErrorIs(t, err, persistence.ErrNotFound, "removed")
		}
	})
}

// pickyForwarder forwards one timeout at a time, and refuses one of them.
type pickyForwarder struct {
	txForwarder
	refuse string
}

func (f *pickyForwarder) Forward(ctx context.Context, t persistence.Timeout, msg *message.Message) (bool, error) {
	if t.ID == f.refuse {
		return false, errors.New("destination refused the message")
	}
	return f.txForwarder.Forward(ctx, t, msg)
}

// A Forwarder without ForwardMany forwards a batch one timeout at a time, stopping at a failure.
// Those before it are forwarded; the satellite looks each up again and finds them gone.
// So no timeout is forwarded twice, and only the refused one counts an attempt.
func TestForwarderWithoutForwardManyStopsAtAFailureAndForwardsNothingTwice(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memory.New()
		var ids []string
		for i := range 10 {
			id := fmt.Sprintf("t-%d", i)
			_, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "dest", Due: time.Now()})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		fwd := &pickyForwarder{txForwarder: txForwarder{store: store}, refuse: "t-4"}
		d, _ := newDispatch(t, store, fwd, 1)

		require.Error(t, d.Handle(dispatcherqueue.Encode(ids...)), "the refused id is nacked for a retry")
		got := map[string]int{}
		for _, m := range fwd.sent {
			got[m.UUID]++
		}
		require.Len(t, got, 9)
		for id, n := range got {
			require.Equal(t, 1, n, "%s forwarded once", id)
		}
		kept, err := store.Peek(ctx, "t-4")
		require.NoError(t, err)
		require.Equal(t, 1, kept.FailureCount, "the refused one counts its attempt")
	})
}
