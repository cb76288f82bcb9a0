package satellites_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// storeClaimedAt stores a timeout due at due and claims it, as the poller does before announcing it.
func (b *dispatchBundle) storeClaimedAt(t *testing.T, destination string, due time.Time) persistence.Timeout {
	t.Helper()
	timeout := persistence.Timeout{ID: watermill.NewUUID(), Destination: destination, Due: due, Payload: []byte("charge order 7")}
	_, err := b.store.Store(context.Background(), timeout)
	require.NoError(t, err)
	ids, err := b.store.ClaimDue(context.Background(), due, 10, time.Minute)
	require.NoError(t, err)
	require.Contains(t, ids, timeout.ID)
	return timeout
}

// announcedAhead is the dispatcher message that announces id as due by dueBy.
func announcedAhead(id string, dueBy time.Time) *message.Message {
	msg := dispatcherqueue.Encode(id)
	msg.Metadata.Set(dispatcherqueue.HeaderDispatchAt, wireparse.FormatExpire(dueBy))
	return msg
}

// An announcement that says when its ids are due is held until then, and the store is read only
// then: the timeout is forwarded not before due, and a Cancel during the hold still wins.
func TestAnnouncementAheadIsHeldUntilItsDueTime(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, nil)
	due := time.Now().Add(150 * time.Millisecond)
	kept := b.storeClaimedAt(t, "payments", due)
	cancelled := b.storeClaimedAt(t, "refunds", due)

	go func() {
		time.Sleep(30 * time.Millisecond)
		_, _ = b.store.Remove(context.Background(), cancelled.ID)
	}()
	done := make(chan error, 1)
	go func() { done <- b.dispatch.Handle(announcedAhead(cancelled.ID, due)) }()
	require.NoError(t, b.dispatch.Handle(announcedAhead(kept.ID, due)))
	require.False(t, time.Now().Before(due), "handled %s before due", time.Until(due))
	out := b.published.only(t, "payments")
	require.Equal(t, kept.ID, out.UUID)
	require.NoError(t, <-done)
	require.Empty(t, b.published.to("refunds"), "cancelled while its announcement was held: not forwarded")
}

// An announcement that says a time further ahead than the hold's bound is looked up at once: its
// timeout, not due, stays in the store (given back where the store can), never forwarded early.
func TestAnnouncementFarAheadIsNotHeldAndNotForwardedEarly(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, nil)
	due := time.Now().Add(10 * time.Second)
	timeout := b.storeClaimedAt(t, "payments", due)

	returned := make(chan error, 1)
	go func() { returned <- b.dispatch.Handle(announcedAhead(timeout.ID, due)) }()
	select {
	case err := <-returned:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("held an announcement 10 s ahead")
	}
	require.Empty(t, b.published.to("payments"))
	_, err := b.store.Peek(context.Background(), timeout.ID)
	require.NoError(t, err, "kept in the store, to be claimed again when due")
}

// A stop during the hold nacks the announcement without reading the store: the timeout stays, to
// be dispatched from the redelivered announcement or given back.
func TestStopDuringTheHoldNacksTheAnnouncement(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, nil)
	due := time.Now().Add(500 * time.Millisecond)
	timeout := b.storeClaimedAt(t, "payments", due)

	msg := announcedAhead(timeout.ID, due)
	ctx, cancel := context.WithCancel(context.Background())
	msg.SetContext(ctx)
	time.AfterFunc(30*time.Millisecond, cancel)
	err := b.dispatch.Handle(msg)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, b.published.to("payments"))
	_, err = b.store.Peek(context.Background(), timeout.ID)
	require.NoError(t, err, "still stored")
}

// A dispatch.at that is not a time is a malformed message: the error queue, with the reason.
func TestMalformedDispatchAtGoesToTheErrorQueue(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, nil)
	timeout := b.storeDue(t, "payments")
	msg := dispatcherqueue.Encode(timeout.ID)
	msg.Metadata.Set(dispatcherqueue.HeaderDispatchAt, "tomorrow")
	require.NoError(t, b.dispatch.Handle(msg))
	failed := b.published.only(t, wire.DefaultErrorQueue)
	require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), dispatcherqueue.HeaderDispatchAt)
	require.Empty(t, b.published.to("payments"))
}

// The hold and the due check read the store's clock (DispatchConfig.Now), not the process's: on
// a store whose clock is 300 ms behind this process's, an announcement due by a time this
// process has passed is held until the store's clock passes it, and a timeout due on this
// process's clock but not on the store's is not forwarded.
func TestHoldAndDueCheckFollowTheStoresClock(t *testing.T) {
	t.Parallel()
	const behind = 300 * time.Millisecond
	storeNow := func() time.Time { return time.Now().Add(-behind) }
	b := setupDispatch(t, func(c *satellites.DispatchConfig) { c.Now = storeNow })

	due := time.Now().Add(-100 * time.Millisecond) // passed here, 200 ms ahead on the store's clock
	held := b.storeClaimedAt(t, "payments", due)
	require.NoError(t, b.dispatch.Handle(announcedAhead(held.ID, due)))
	require.False(t, storeNow().Before(due), "handled %s before due on the store's clock", due.Sub(storeNow()))
	require.Equal(t, held.ID, b.published.only(t, "payments").UUID)

	notDue := b.storeClaimedAt(t, "refunds", time.Now().Add(-100*time.Millisecond))
	require.NoError(t, b.dispatch.Handle(dispatcherqueue.Encode(notDue.ID)))
	require.Empty(t, b.published.to("refunds"), "not due on the store's clock: not forwarded")
	_, err := b.store.Peek(context.Background(), notDue.ID)
	require.NoError(t, err, "kept in the store, to be claimed again when due")
}
