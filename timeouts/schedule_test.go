package timeouts_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

func delayedMsg(payload string, after time.Duration) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	timeouts.DeliverAfter(msg, after)
	return msg
}

// TestScheduleThenCancelAtOnce: a timeout Schedule returned is there for Get and Cancel at once,
// so a cancel right after scheduling is never lost.
func TestScheduleThenCancelAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		arrivals := subscribe(t, b.pubSub, "reminders")
		ctx := t.Context()
		const n = 20
		for i := range n {
			msg := delayedMsg(fmt.Sprintf("cancelled %d", i), 200*time.Millisecond)
			res, err := b.manager.Schedule(ctx, "reminders", msg)
			require.NoError(t, err)
			require.Equal(t, persistence.Scheduled{ID: msg.UUID, Outcome: persistence.Created}, res)
			got, err := b.manager.Get(ctx, res.ID)
			require.NoError(t, err)
			require.Equal(t, "reminders", got.Destination)
			require.Equal(t, msg.Payload, message.Payload(got.Payload))
			cancelled, err := b.manager.Cancel(ctx, res.ID)
			require.NoError(t, err)
			require.True(t, cancelled, "Cancel right after Schedule")
		}
		kept := delayedMsg("kept", 300*time.Millisecond)
		_, err := b.manager.Schedule(ctx, "reminders", kept)
		require.NoError(t, err)
		a := await(t, arrivals, 10*time.Second)
		require.Equal(t, kept.UUID, a.msg.UUID, "only the timeout not cancelled arrives")
		requireNothing(t, arrivals, 300*time.Millisecond)
	})
}

// TestReschedule: earlier, later and "now" move the delivery; the delivered message says the due
// time it was delivered for, and it is never early. It runs on virtual time (testing/synctest).
// "Earlier" and "now" come while the poller sleeps towards a due time seconds away: only the wake
// Reschedule gives it delivers them within the second the test allows.
func TestReschedule(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		arrivals := subscribe(t, b.pubSub, "reminders")
		ctx := t.Context()

		later := delayedMsg("later", 100*time.Millisecond)
		_, err := b.manager.Schedule(ctx, "reminders", later)
		require.NoError(t, err)
		earlier := delayedMsg("earlier", time.Hour)
		_, err = b.manager.Schedule(ctx, "reminders", earlier)
		require.NoError(t, err)
		now := delayedMsg("now", time.Hour)
		_, err = b.manager.Schedule(ctx, "reminders", now)
		require.NoError(t, err)

		laterDue := time.Now().Add(5 * time.Second)
		ok, err := b.manager.Reschedule(ctx, later.UUID, laterDue)
		require.NoError(t, err)
		require.True(t, ok)
		// Past the old due time: the poller polled, found nothing due, and sleeps towards the new
		// one, seconds away. (time.Sleep advances the bubble's virtual clock.)
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		select {
		case a := <-arrivals:
			t.Fatalf("%s arrived at its old due time, before the one it was rescheduled to", a.msg.Payload)
		default:
		}

		earlierDue := time.Now().Add(300 * time.Millisecond)
		ok, err = b.manager.Reschedule(ctx, earlier.UUID, earlierDue)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = b.manager.Reschedule(ctx, now.UUID, time.Now().Add(-time.Hour)) // the past means now
		require.NoError(t, err)
		require.True(t, ok)

		for _, want := range []struct {
			msg *message.Message
			due time.Time
		}{{now, time.Time{}}, {earlier, earlierDue}, {later, laterDue}} {
			a := await(t, arrivals, 10*time.Second)
			require.Equal(t, want.msg.UUID, a.msg.UUID, "arrival order follows the new due times")
			due, err := wireparse.ParseExpire(a.msg.Metadata.Get(wire.HeaderDue))
			require.NoError(t, err, "%s: the delivered message says when it was due", wire.HeaderDue)
			require.False(t, a.at.Before(due), "%s arrived at %s, before its due time %s", a.msg.Payload, a.at, due)
			require.Less(t, a.at.Sub(due), time.Second, "%s: delivered within a second of its due time: Reschedule woke the poller", a.msg.Payload)
			if !want.due.IsZero() {
				require.True(t, wireparse.RoundUp(want.due).Equal(due), "due header %s, rescheduled to %s", due, want.due)
			}
		}

		// Delivered: no longer pending, so false, not an error; and never delivered again.
		ok, err = b.manager.Reschedule(ctx, later.UUID, time.Now().Add(100*time.Millisecond))
		require.NoError(t, err)
		require.False(t, ok, "Reschedule of a delivered timeout")
		requireNothing(t, arrivals, 300*time.Millisecond)
	})
}

// TestKeys: messages marked WithKey replace or are dropped by a pending timeout with their key,
// through Schedule and through the Timeouts queue alike.
func TestKeys(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		arrivals := subscribe(t, b.pubSub, "reminders")
		ctx := t.Context()

		first := delayedMsg("replace: first", 300*time.Millisecond)
		timeouts.WithKey(first, "order-42/payment", persistence.KeyReplace)
		res, err := b.manager.Schedule(ctx, "reminders", first)
		require.NoError(t, err)
		require.Equal(t, persistence.Created, res.Outcome)
		second := delayedMsg("replace: second", 400*time.Millisecond)
		timeouts.WithKey(second, "order-42/payment", persistence.KeyReplace)
		require.NoError(t, b.manager.Publisher().Publish("reminders", second)) // through the Timeouts queue
		got, err := b.manager.List(ctx, persistence.ListOptions{Key: "order-42/payment"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, second.UUID, got[0].ID, "the second replaced the first")

		kept := delayedMsg("keep: first", 500*time.Millisecond)
		timeouts.WithKey(kept, "order-43/payment", persistence.KeyKeep)
		_, err = b.manager.Schedule(ctx, "reminders", kept)
		require.NoError(t, err)
		dropped := delayedMsg("keep: second", 100*time.Millisecond)
		timeouts.WithKey(dropped, "order-43/payment", persistence.KeyKeep)
		res, err = b.manager.Schedule(ctx, "reminders", dropped)
		require.NoError(t, err)
		require.Equal(t, persistence.Scheduled{ID: kept.UUID, Outcome: persistence.Duplicate}, res)

		for _, want := range []*message.Message{second, kept} {
			a := await(t, arrivals, 10*time.Second)
			require.Equal(t, string(want.Payload), string(a.msg.Payload))
			require.Empty(t, a.msg.Metadata.Get(wire.HeaderKey), "the key is a routing header, not delivered")
		}
		requireNothing(t, arrivals, 300*time.Millisecond)
	})
}

// unkeyedStore is a Store with none of the optional capabilities.
type unkeyedStore struct{ inner }

// TestScheduleBadInput: each bad input is an error naming it, never a panic or a silent no-op.
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		ctx := t.Context()
		invalid := func(name string, err error, words string) {
			t.Helper()
			require.ErrorIs(t, err, persistence.ErrInvalidTimeout, name)
			require.ErrorContains(t, err, words, name)
		}
		_, err := b.manager.Schedule(ctx, "reminders", nil)
		invalid("nil message", err, "nil")
		_, err = b.manager.Schedule(ctx, "reminders", message.NewMessage("", nil))
		invalid("no UUID", err, "UUID")
		far := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAt(far, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
		_, err = b.manager.Schedule(ctx, "reminders", far)
		require.ErrorContains(t, err, "out of range", "a due time beyond 9999")
		emptyKey := delayedMsg("x", time.Minute)
		timeouts.WithKey(emptyKey, "", persistence.KeyReplace)
		_, err = b.manager.Schedule(ctx, "reminders", emptyKey)
		require.ErrorIs(t, err, wire.ErrInvalidHeader)
		require.ErrorContains(t, err, "timeout.key is empty")
		badPolicy := delayedMsg("x", time.Minute)
		badPolicy.Metadata.Set(wire.HeaderKey, "k")
		badPolicy.Metadata.Set(wire.HeaderKeyPolicy, "newest")
		_, err = b.manager.Schedule(ctx, "reminders", badPolicy)
		require.ErrorContains(t, err, `"newest"`)
		_, err = b.manager.Schedule(ctx, "", delayedMsg("x", time.Minute))
		require.ErrorIs(t, err, wire.ErrInvalidHeader, "empty topic")

		_, err = b.manager.Reschedule(ctx, "", time.Now())
		invalid("Reschedule of an empty id", err, "empty")
		_, err = b.manager.Reschedule(ctx, "some-id", time.Time{})
		invalid("Reschedule to a zero time", err, "zero")
		_, err = b.manager.Reschedule(ctx, "some-id", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
		invalid("Reschedule beyond 9999", err, "out of range")
		ok, err := b.manager.Reschedule(ctx, "unknown", time.Now())
		require.NoError(t, err)
		require.False(t, ok, "Reschedule of an unknown id")
		_, err = b.manager.Get(ctx, "unknown")
		require.ErrorIs(t, err, persistence.ErrNotFound)
		require.ErrorContains(t, err, `"unknown"`)
		_, err = b.manager.Get(ctx, strings.Repeat("x", 1<<20))
		invalid("Get of a 1 MB id", err, "longer than")
		_, err = b.manager.Cancel(ctx, "")
		invalid("Cancel of an empty id", err, "empty")
		_, err = b.manager.CancelByOwner(ctx, "")
		invalid("CancelByOwner of an empty owner", err, "empty")
		_, err = b.manager.List(ctx, persistence.ListOptions{Limit: 1_000_000})
		invalid("List of a million", err, "limit")

		// A store without the optional capabilities: a clear ErrUnsupported naming what is missing.
		plain := setup(t, unkeyedStore{memory.New()}, nil)
		keyedMsg := delayedMsg("x", time.Minute)
		timeouts.WithKey(keyedMsg, "k", persistence.KeyKeep)
		_, err = plain.manager.Schedule(ctx, "reminders", keyedMsg)
		require.ErrorIs(t, err, persistence.ErrUnsupported)
		require.ErrorContains(t, err, "persistence.Scheduler")
		res, err := plain.manager.Schedule(ctx, "reminders", delayedMsg("x", time.Minute))
		require.NoError(t, err, "a store without Scheduler still schedules timeouts without a key")
		require.Equal(t, persistence.Created, res.Outcome)
		_, err = plain.manager.Reschedule(ctx, res.ID, time.Now())
		require.ErrorIs(t, err, persistence.ErrUnsupported)
		_, err = plain.manager.Stats(ctx)
		require.ErrorIs(t, err, persistence.ErrUnsupported)
		_, err = plain.manager.ScheduleTx(ctx, nil, "reminders", delayedMsg("x", time.Minute))
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout)
		_, err = plain.manager.ScheduleTx(ctx, &sql.Tx{}, "reminders", delayedMsg("x", time.Minute))
		require.ErrorIs(t, err, persistence.ErrUnsupported, "a store without TxScheduler")
	})
}

// TestScheduleWaitsForReady: Schedule on a manager whose router never started waits, and gives
// up with the caller's context.
func TestScheduleWaitsForReady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		manager, err := timeouts.NewManager(timeouts.Config{Endpoint: "idle", Store: memory.New(), Publisher: b.pubSub, Subscriber: b.pubSub}, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err = manager.Schedule(ctx, "reminders", delayedMsg("x", time.Minute))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = manager.ScheduleTx(t.Context(), &sql.Tx{}, "reminders", delayedMsg("x", time.Minute))
		require.ErrorIs(t, err, timeouts.ErrNotReady, "ScheduleTx does not wait: the caller's transaction could block the set-up")
	})
}

// TestStats counts what Schedule stored.
func TestStats(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		ctx := t.Context()
		for i := range 3 {
			_, err := b.manager.Schedule(ctx, fmt.Sprintf("topic-%d", i%2), delayedMsg("x", time.Hour))
			require.NoError(t, err)
		}
		st, err := b.manager.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, st.Pending)
		require.Zero(t, st.DueNow)
		require.Equal(t, map[string]int{"topic-0": 2, "topic-1": 1}, st.ByDestination)
	})
}
