package acceptance

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The scenarios every broker must pass (see brokers_test.go for the brokers).

func TestOnEveryBrokerATimeoutIsNeverEarlyAndAnOverdueOneComesAtOnce(t *testing.T) {
	t.Parallel()
	forEachBroker(t, "due", func(t *testing.T, e *brokerEnv) {
		store := sqliteStore(t, e.endpoint)
		n := e.startNode(t, "a", store, nil)
		dest := e.queue("payments")
		delivered := e.receive(t, dest)

		msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 42"))
		due := time.Now().Add(2 * time.Second)
		timeouts.DeliverAt(msg, due)
		require.NoError(t, n.manager.Publisher().Publish(dest, msg))
		got := await(t, delivered, 2*time.Second+lateBound)
		require.Equal(t, msg.UUID, got.msg.UUID)
		require.False(t, got.at.Before(due), "delivered %s early", due.Sub(got.at))
		for _, h := range []string{wire.HeaderExpire, wire.HeaderDestination} {
			require.NotContains(t, got.msg.Metadata, h, "routing headers are removed on delivery")
		}
		t.Logf("%s: delivered %s after due", e.name, got.at.Sub(due).Round(time.Millisecond))

		// An hour overdue, from a producer that is not Watermill, straight onto E.Timeouts.
		sent := time.Now()
		e.plain(t, e.timeoutsQueue(), "an-hour-late", []byte("an hour late"), map[string]string{
			wire.HeaderExpire:      time.Now().Add(-time.Hour).Format(time.RFC3339),
			wire.HeaderDestination: dest,
		})
		got = await(t, delivered, lateBound)
		require.Equal(t, "an-hour-late", got.msg.UUID)
		require.Equal(t, "an hour late", string(got.msg.Payload))
		t.Logf("%s: an hour overdue, delivered %s after it was sent", e.name, got.at.Sub(sent).Round(time.Millisecond))
		requireNothing(t, delivered, 500*time.Millisecond)
		require.Eventually(t, func() bool { return pending(t, store) == 0 }, lateBound, 20*time.Millisecond)
	})
}

func TestOnEveryBrokerHeadersAndPayloadArriveByteForByte(t *testing.T) {
	t.Parallel()
	forEachBroker(t, "bytes", func(t *testing.T, e *brokerEnv) {
		n := e.startNode(t, "a", sqliteStore(t, e.endpoint), nil)
		dest := e.queue("archive")
		delivered := e.receive(t, dest)

		body := make([]byte, 1<<20)
		_, err := rand.Read(body)
		require.NoError(t, err)
		body[0], body[1], body[len(body)-1] = 0, 0xff, 0 // NULs and invalid UTF-8 at the edges
		msg := message.NewMessage(watermill.NewUUID(), body)
		headers := map[string]string{
			"trace-id":         "abc-ünïcödé-日本語-✓-🚀",
			"ключ":             "значение",
			"emoji-🔑":          "value with\ttab, \"quotes\" and 'apostrophes'",
			"empty":            "",
			"rtl":              "שלום עולם",
			"combining":        "e\u0301",
			"_watermill_hints": "not ours, kept",
		}
		for k, v := range headers {
			msg.Metadata.Set(k, v)
		}
		timeouts.DeliverAfter(msg, 500*time.Millisecond)
		require.NoError(t, n.manager.Publisher().Publish(dest, msg))

		got := await(t, delivered, lateBound)
		require.Equal(t, msg.UUID, got.msg.UUID)
		require.True(t, bytes.Equal(body, got.msg.Payload), "the 1 MiB body differs (%d bytes received)", len(got.msg.Payload))
		require.NotEmpty(t, got.msg.Metadata.Get(wire.HeaderDue), "a delivered message says the due time it was delivered for")
		delete(got.msg.Metadata, wire.HeaderDue)
		require.Equal(t, message.Metadata(headers), got.msg.Metadata, "every header as sent, less the routing headers")
	})
}

// TestOnEveryBrokerManyTimeoutsSurviveAManagerRestart stops the endpoint's only manager while
// 2,000 due timeouts are being delivered and starts another on the same store: none is lost.
// Duplicates are possible (a message forwarded whose removal the stop interrupted) and counted.
func TestOnEveryBrokerManyTimeoutsSurviveAManagerRestart(t *testing.T) {
	t.Parallel()
	const count = 2000
	forEachBroker(t, "restart", func(t *testing.T, e *brokerEnv) {
		open := sqliteStores(t, e.endpoint)
		lease := func(c *timeouts.Config) { c.ClaimLease = brokerRedeliverAfter }
		storeA := open(t)
		a := e.startNode(t, "a", storeA, lease)
		dest := e.queue("due")
		delivered := e.receive(t, dest)

		due := time.Now().Add(8 * time.Second)
		msgs, ids := dueAt(count, due)
		start := time.Now()
		publishConcurrently(t, a.manager.Publisher(), dest, msgs, 8)
		t.Logf("%s: published %d in %s; %s", e.name, count, time.Since(start).Round(time.Millisecond), storedNote(waitStored(t, storeA, count, due), start))

		seen := map[string]int{}
		collect := func(until func() bool) {
			for !until() {
				got := await(t, delivered, untilDue(due)+stallBound)
				require.False(t, got.at.Before(wireparse.RoundUp(due)), "message %s delivered %s early", got.msg.UUID, due.Sub(got.at))
				require.True(t, ids[got.msg.UUID], "unknown message %s", got.msg.UUID)
				seen[got.msg.UUID]++
			}
		}
		collect(func() bool { return len(seen) >= count/4 })
		stopAt := time.Now()
		a.stop()
		before := len(seen)
		e.startNode(t, "b", open(t), lease)
		restarted := time.Now()
		collect(func() bool { return len(seen) == count })
		// Duplicates would come now, if at all: each is one of ours, never early, and counted.
		for quiet := time.After(3 * time.Second); ; {
			select {
			case got := <-delivered:
				require.True(t, ids[got.msg.UUID], "unknown message %s", got.msg.UUID)
				require.False(t, got.at.Before(wireparse.RoundUp(due)), "message %s delivered %s early", got.msg.UUID, due.Sub(got.at))
				seen[got.msg.UUID]++
				continue
			case <-quiet:
			}
			break
		}
		t.Logf("%s: manager stopped after %d of %d deliveries (stop took %s); the new one delivered the rest, the last %s after it started: 0 lost, %d duplicates",
			e.name, before, count, restarted.Sub(stopAt).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond), duplicates(seen))
	})
}

// TestOnEveryBrokerCompetingManagersLoseNothing runs two managers of one endpoint on one store
// and 2,000 timeouts due at one instant: each arrives, and duplicates (none expected: nothing
// crashes) are counted.
func TestOnEveryBrokerCompetingManagersLoseNothing(t *testing.T) {
	t.Parallel()
	const count = 2000
	forEachBroker(t, "two", func(t *testing.T, e *brokerEnv) {
		open := sqliteStores(t, e.endpoint)
		storeA := open(t)
		a := e.startNode(t, "a", storeA, nil)
		e.startNode(t, "b", open(t), nil)
		dest := e.queue("due")
		delivered := e.receive(t, dest)

		due := time.Now().Add(10 * time.Second)
		msgs, ids := dueAt(count, due)
		start := time.Now()
		publishConcurrently(t, a.manager.Publisher(), dest, msgs, 8)
		t.Logf("%s: published %d in %s; %s", e.name, count, time.Since(start).Round(time.Millisecond), storedNote(waitStored(t, storeA, count, due), start))

		seen := map[string]int{}
		var last time.Time
		for len(seen) < count {
			got := await(t, delivered, untilDue(due)+stallBound)
			require.False(t, got.at.Before(wireparse.RoundUp(due)), "message %s delivered %s early", got.msg.UUID, due.Sub(got.at))
			require.True(t, ids[got.msg.UUID], "unknown message %s", got.msg.UUID)
			seen[got.msg.UUID]++
			last = got.at
		}
		requireNothing(t, delivered, 3*time.Second)
		require.Eventually(t, func() bool { return pending(t, storeA) == 0 }, lateBound, 50*time.Millisecond)
		spread := last.Sub(due)
		t.Logf("%s: two managers, %d due at one instant: last delivered %s after due (%.0f deliveries/s): 0 lost, %d duplicates",
			e.name, count, spread.Round(time.Millisecond), count/spread.Seconds(), duplicates(seen))
	})
}

// TestOnEveryBrokerPoisonOnTheTimeoutsQueueEndsOnTheErrorQueue: what a producer that is not
// Watermill can get wrong on E.Timeouts reaches the error queue once, with a reason, and the
// endpoint goes on.
func TestOnEveryBrokerPoisonOnTheTimeoutsQueueEndsOnTheErrorQueue(t *testing.T) {
	t.Parallel()
	forEachBroker(t, "poison", func(t *testing.T, e *brokerEnv) {
		store := sqliteStore(t, e.endpoint)
		n := e.startNode(t, "a", store, nil)
		dest := e.queue("good")
		delivered := e.receive(t, dest)
		errs := e.receive(t, e.errorQueue)

		e.plain(t, e.timeoutsQueue(), "garbage-expire", []byte("poison 1"), map[string]string{
			wire.HeaderExpire: "next tuesday", wire.HeaderDestination: dest, "attempt": "7",
		})
		got := await(t, errs, lateBound)
		require.Equal(t, "garbage-expire", got.msg.UUID)
		require.Equal(t, "poison 1", string(got.msg.Payload))
		reason := got.msg.Metadata.Get(wire.HeaderFailureReason)
		require.Contains(t, reason, "next tuesday")
		require.Equal(t, e.timeoutsQueue(), got.msg.Metadata.Get(wire.HeaderFailureQueue))
		require.Equal(t, "7", got.msg.Metadata.Get("attempt"), "the other headers are kept for a person to look at")
		t.Logf("%s: failure.reason = %q", e.name, reason)

		e.plain(t, e.timeoutsQueue(), "no-destination", []byte("poison 2"), map[string]string{
			wire.HeaderExpire: time.Now().Format(time.RFC3339),
		})
		got = await(t, errs, lateBound)
		require.Equal(t, "no-destination", got.msg.UUID)
		require.Contains(t, got.msg.Metadata.Get(wire.HeaderFailureReason), wire.HeaderDestination)

		good := message.NewMessage(watermill.NewUUID(), []byte("still served"))
		timeouts.DeliverAfter(good, 300*time.Millisecond)
		require.NoError(t, n.manager.Publisher().Publish(dest, good))
		require.Equal(t, good.UUID, await(t, delivered, lateBound).msg.UUID)
		requireNothing(t, errs, time.Second)
		require.Zero(t, pending(t, store))
	})
}

// TestOnEveryBrokerDelayedRetriesGoThroughTheDeferredQueue: a handler fails twice, then succeeds,
// on a schedule of [1 s, 2 s]; each retry waits in the instance's deferred queue on the broker
// and comes no earlier than its time. A handler that always fails ends on the error queue after
// 1 + len(schedule) calls.
func TestOnEveryBrokerDelayedRetriesGoThroughTheDeferredQueue(t *testing.T) {
	t.Parallel()
	forEachBroker(t, "retries", func(t *testing.T, e *brokerEnv) {
		schedule := []time.Duration{time.Second, 2 * time.Second}
		work, doomed := e.queue("work"), e.queue("doomed")
		var calls []time.Time
		succeeded := make(chan *message.Message, 1)
		var doomedCalls atomic.Int32

		ps := e.open(t, e.endpoint+" retries", 1)
		retries, err := recoverability.New(recoverability.Config{
			WorkQueue: work, DeferredQueue: wire.DeferredQueue(e.endpoint, "instance-1"), ErrorQueue: e.errorQueue,
			DurationToIgnoreOnFailure: schedule, Publisher: ps.pub, Subscriber: ps.sub,
		}, testLogger())
		require.NoError(t, err)
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, testLogger())
		require.NoError(t, err)
		router.AddConsumerHandler("work", work, ps.sub, func(msg *message.Message) error {
			calls = append(calls, time.Now()) // one consumer: one call at a time
			if len(calls) < 3 {
				return errors.New("payment provider unavailable")
			}
			succeeded <- msg
			return nil
		}).AddMiddleware(retries.Middleware)
		doomedRetries, err := recoverability.New(recoverability.Config{
			WorkQueue: doomed, DeferredQueue: wire.DeferredQueue(e.endpoint, "instance-2"), ErrorQueue: e.errorQueue,
			DurationToIgnoreOnFailure: schedule, Publisher: ps.pub, Subscriber: ps.sub,
		}, testLogger())
		require.NoError(t, err)
		router.AddConsumerHandler("doomed", doomed, ps.sub, func(*message.Message) error {
			doomedCalls.Add(1)
			return errors.New("card declined")
		}).AddMiddleware(doomedRetries.Middleware)
		require.NoError(t, retries.AddToRouter(router))
		require.NoError(t, doomedRetries.AddToRouter(router))
		stopped := make(chan struct{})
		go func() { defer close(stopped); _ = router.Run(t.Context()) }()
		t.Cleanup(func() { _ = router.Close(); <-stopped })
		<-router.Running()
		errs := e.receive(t, e.errorQueue)

		producer := e.open(t, e.endpoint+" producer", 1).pub
		msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 42"))
		msg.Metadata.Set("trace", "ü-1")
		require.NoError(t, producer.Publish(work, msg))
		lost := message.NewMessage(watermill.NewUUID(), []byte("order 43"))
		require.NoError(t, producer.Publish(doomed, lost))

		var got *message.Message
		select {
		case got = <-succeeded:
		case <-time.After(2 * time.Minute):
			t.Fatalf("not handled; calls so far: %d", len(calls))
		}
		require.Len(t, calls, 3, "failed twice, then succeeded")
		require.GreaterOrEqual(t, calls[1].Sub(calls[0]), schedule[0], "first delayed retry not before its time")
		require.GreaterOrEqual(t, calls[2].Sub(calls[1]), schedule[1], "second delayed retry not before its time")
		require.Equal(t, msg.UUID, got.UUID)
		require.Equal(t, "ü-1", got.Metadata.Get("trace"))
		require.Equal(t, "2", got.Metadata.Get(wire.HeaderRetryDelayedRetries))
		t.Logf("%s: calls at +0, +%s, +%s", e.name, calls[1].Sub(calls[0]).Round(time.Millisecond), calls[2].Sub(calls[0]).Round(time.Millisecond))

		failed := await(t, errs, 2*time.Minute)
		require.Equal(t, lost.UUID, failed.msg.UUID)
		require.Contains(t, failed.msg.Metadata.Get(wire.HeaderFailureReason), "card declined")
		require.Equal(t, doomed, failed.msg.Metadata.Get(wire.HeaderFailureQueue))
		require.Equal(t, "3", failed.msg.Metadata.Get(wire.HeaderFailureAttempts))
		require.EqualValues(t, 3, doomedCalls.Load(), "1 + len(DurationToIgnoreOnFailure) calls")
	})
}

// dueAt makes n messages due at one instant, and the set of their ids.
func dueAt(n int, due time.Time) ([]*message.Message, map[string]bool) {
	msgs := make([]*message.Message, n)
	ids := make(map[string]bool, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "%d", i))
		timeouts.DeliverAt(msgs[i], due)
		ids[msgs[i].UUID] = true
	}
	return msgs, ids
}

// duplicates counts the deliveries beyond the first of each message.
func duplicates(seen map[string]int) int {
	n := 0
	for _, c := range seen {
		n += c - 1
	}
	return n
}
