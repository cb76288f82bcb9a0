package satellites_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/errorqueue"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// storeSatellite returns a store satellite on b's store and publisher.
func (b *batchBundle) storeSatellite(t *testing.T, stored func(time.Time)) *satellites.Store {
	t.Helper()
	return storeSatelliteOn(t, b.store, b.published, stored)
}

// storeSatelliteOn returns a store satellite on store, its error queue on published.
func storeSatelliteOn(t *testing.T, store persistence.Store, published message.Publisher, stored func(time.Time)) *satellites.Store {
	t.Helper()
	breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "store", TimeToWait: time.Hour, Message: critical.StoreMessage,
		RetryDelay: time.Millisecond, OnTrip: func(*critical.Error) {},
	})
	require.NoError(t, err)
	t.Cleanup(breaker.Stop)
	s, err := satellites.NewStore(satellites.StoreConfig{
		Endpoint: endpoint, Store: store, ErrorQueue: errorqueue.New(published, ""),
		Breaker: breaker, OnStored: stored,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	return s
}

func delayedMessage(id, destination string, due time.Time) *message.Message {
	msg := message.NewMessage(id, []byte("charge "+id))
	msg.Metadata.Set(wire.HeaderExpire, wireparse.FormatExpire(due))
	msg.Metadata.Set(wire.HeaderDestination, destination)
	msg.Metadata.Set("trace-id", id)
	return msg
}

func handleConcurrently(s *satellites.Store, msgs []*message.Message) []error {
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, msg := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Handle(msg)
		}()
	}
	wg.Wait()
	return errs
}

func TestBatchStoreStoresEachOnceAndAcksRedeliveries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, nil)
		var mu sync.Mutex
		woken := 0
		s := b.storeSatellite(t, func(time.Time) { mu.Lock(); woken++; mu.Unlock() })
		due := time.Now().Add(time.Hour)
		var msgs []*message.Message
		for i := range 200 {
			msgs = append(msgs, delayedMessage(fmt.Sprintf("m-%d", i), "payments", due))
		}
		redelivered := msgs[:20]

		for _, err := range handleConcurrently(s, append(append([]*message.Message(nil), msgs...), redelivered...)) {
			require.NoError(t, err)
		}
		st, err := b.store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Equal(t, 200, st.Pending)
		require.Equal(t, 200, woken, "the poller hears of each new timeout once")
		got, err := b.store.Peek(context.Background(), "m-7")
		require.NoError(t, err)
		require.Equal(t, "charge m-7", string(got.Payload))
		require.Equal(t, "m-7", got.Metadata["trace-id"])
		require.Empty(t, got.Metadata[wire.HeaderDestination], "routing headers are not kept")
		require.Empty(t, b.published.to(wire.DefaultErrorQueue))
	})
}

func TestBatchStoreSendsAReusedUUIDToTheErrorQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, nil)
		s := b.storeSatellite(t, nil)
		due := time.Now().Add(time.Hour)
		msgs := []*message.Message{delayedMessage("same", "payments", due), delayedMessage("other", "payments", due)}
		for _, err := range handleConcurrently(s, msgs) {
			require.NoError(t, err)
		}
		var clash []*message.Message
		for i := range 10 {
			clash = append(clash, delayedMessage(fmt.Sprintf("new-%d", i), "payments", due))
		}
		clash = append(clash, delayedMessage("same", "shipping", due))
		for _, err := range handleConcurrently(s, clash) {
			require.NoError(t, err)
		}
		failed := b.published.only(t, wire.DefaultErrorQueue)
		require.Equal(t, "same", failed.UUID)
		require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), "reuses its UUID")
		kept, err := b.store.Peek(context.Background(), "same")
		require.NoError(t, err)
		require.Equal(t, "payments", kept.Destination, "the first stays")
	})
}

func TestBatchStoreFallsBackToOneByOneWhenTheBatchFails(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBatch(t, nil)
		b.store.storeErr = errors.New("deadlock detected")
		s := b.storeSatellite(t, nil)
		due := time.Now().Add(time.Hour)
		var msgs []*message.Message
		for i := range 50 {
			msgs = append(msgs, delayedMessage(fmt.Sprintf("m-%d", i), "payments", due))
		}
		bad := delayedMessage("bad", "payments", due)
		bad.Metadata.Set(wire.HeaderExpire, "tomorrow")
		for _, err := range handleConcurrently(s, append(msgs, bad)) {
			require.NoError(t, err)
		}
		st, err := b.store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Equal(t, 50, st.Pending)
		require.Equal(t, "bad", b.published.only(t, wire.DefaultErrorQueue).UUID, "an unreadable message is rejected as ever")
	})
}
