package satellites_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	public "github.com/timeoutmill/timeoutmill/satellites"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/errorqueue"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
)

// txForwarder stands in for a transport that publishes and removes in one transaction.
type txForwarder struct {
	store persistence.Store
	fail  error
	mu    sync.Mutex
	sent  []*message.Message
}

func (f *txForwarder) Forward(ctx context.Context, t persistence.Timeout, msg *message.Message) (bool, error) {
	if f.fail != nil {
		return false, f.fail // the transaction rolled back: nothing published, nothing removed
	}
	removed, err := f.store.Remove(ctx, t.ID)
	if err != nil || !removed {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, msg)
	return true, nil
}

func newDispatch(t *testing.T, store persistence.Store, fwd public.Forwarder, retries int) (*satellites.Dispatch, *gochannel.GoChannel) {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "dispatch", TimeToWait: time.Hour, Message: critical.DispatchMessage, RetryDelay: time.Millisecond, OnTrip: func(*critical.Error) {},
	})
	require.NoError(t, err)
	t.Cleanup(breaker.Stop)
	d, err := satellites.NewDispatch(satellites.DispatchConfig{
		Endpoint: "e", Store: store, Publisher: pubSub, ErrorQueue: errorqueue.New(pubSub, ""),
		Breaker: breaker, NumberOfRetries: retries, Forwarder: fwd,
	}, nil)
	require.NoError(t, err)
	return d, pubSub
}

func TestForwarderDeliversAndRemovesInOneStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memory.New()
	_, err := store.Store(ctx, persistence.Timeout{ID: "t1", Destination: "dest", Due: time.Now(), Payload: []byte("p"), Metadata: map[string]string{"h": "v"}})
	require.NoError(t, err)
	fwd := &txForwarder{store: store}
	d, _ := newDispatch(t, store, fwd, 0)

	require.NoError(t, d.Handle(dispatcherqueue.Encode("t1")))
	require.Len(t, fwd.sent, 1)
	require.Equal(t, "t1", fwd.sent[0].UUID)
	require.Equal(t, "v", fwd.sent[0].Metadata.Get("h"))

	// The dispatcher message is redelivered: the timeout is gone, nothing is forwarded twice.
	require.NoError(t, d.Handle(dispatcherqueue.Encode("t1")))
	require.Len(t, fwd.sent, 1)
}

func TestForwarderFailureCountsAsAFailedForward(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memory.New()
	_, err := store.Store(ctx, persistence.Timeout{ID: "t2", Destination: "dest", Due: time.Now()})
	require.NoError(t, err)
	d, pubSub := newDispatch(t, store, &txForwarder{store: store, fail: errors.New("tx aborted")}, 1)
	errs, err := pubSub.Subscribe(ctx, "error")
	require.NoError(t, err)

	require.Error(t, d.Handle(dispatcherqueue.Encode("t2")), "first of two attempts: nacked for a retry")
	require.NoError(t, d.Handle(dispatcherqueue.Encode("t2")), "second: to the error queue")
	select {
	case m := <-errs:
		m.Ack()
		require.Contains(t, m.Metadata.Get("failure.reason"), "tx aborted")
		require.Equal(t, "2", m.Metadata.Get("failure.attempts"))
	case <-time.After(5 * time.Second):
		t.Fatal("nothing on the error queue")
	}
	_, err = store.Peek(ctx, "t2")
	require.ErrorIs(t, err, persistence.ErrNotFound)
}
