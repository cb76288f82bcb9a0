package sqltransport

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/satellites"
)

func publishN(t *testing.T, pub *Publisher, topic string, n int) []string {
	t.Helper()
	var msgs []*message.Message
	var uuids []string
	for i := range n {
		m := message.NewMessage(fmt.Sprintf("m-%03d", i), []byte{byte(i)})
		msgs = append(msgs, m)
		uuids = append(uuids, m.UUID)
	}
	require.NoError(t, pub.Publish(topic, msgs...))
	return uuids
}

// TestConsumersHandOutTheirWholeBatchAtOnce: with several consumers a consumer hands out every
// message of its batch without waiting for acks, so a handler sees them all before acking any,
// and the acked rows are gone afterwards.
func TestConsumersHandOutTheirWholeBatchAtOnce(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.Consumers = 2
		config.BatchSize = 5
		pub, sub := newPubSub(t, config)
		sent := publishN(t, pub, "wide", 10)
		msgs, err := sub.Subscribe(t.Context(), "wide")
		require.NoError(t, err)
		var held []*message.Message
		for range sent {
			held = append(held, next(t, msgs)) // none acked yet
		}
		var got []string
		for _, m := range held {
			got = append(got, m.UUID)
			m.Ack()
		}
		sort.Strings(got)
		require.Equal(t, sent, got, "each once")
		nothing(t, msgs, 200*time.Millisecond)
		require.Eventually(t, func() bool { return db.rows(t, "wide") == 0 || db.count(t, "wide") == 0 }, 10*time.Second, 20*time.Millisecond)
	})
}

// TestNackInAWideBatchHandsOnlyThatMessageOutAgain: the others of the batch are acked and
// deleted; the nacked one comes back and is deleted once acked.
func TestNackInAWideBatchHandsOnlyThatMessageOutAgain(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.Consumers = 2
		config.BatchSize = 5
		config.ResendInterval = 10 * time.Millisecond
		pub, sub := newPubSub(t, config)
		sent := publishN(t, pub, "nacks", 5)
		msgs, err := sub.Subscribe(t.Context(), "nacks")
		require.NoError(t, err)
		seen := map[string]int{}
		for range sent {
			m := next(t, msgs)
			seen[m.UUID]++
			if m.UUID == "m-002" {
				m.Nack()
				continue
			}
			m.Ack()
		}
		again := next(t, msgs)
		require.Equal(t, "m-002", again.UUID, "only the nacked message again")
		again.Ack()
		nothing(t, msgs, 200*time.Millisecond)
		require.Len(t, seen, 5)
		require.Eventually(t, func() bool { return db.count(t, "nacks") == 0 }, 10*time.Second, 20*time.Millisecond)
	})
}

// TestANackDoesNotHoldItsBatchMatesBack: with several consumers a message that keeps being nacked
// goes back to its table after ResendInterval, so the acked rest of its batch is deleted then,
// not after the nacked one's AckDeadline (30 s here).
func TestANackDoesNotHoldItsBatchMatesBack(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.Consumers = 2
		config.BatchSize = 5
		config.ResendInterval = 100 * time.Millisecond
		config.AckDeadline = 30 * time.Second
		pub, sub := newPubSub(t, config)
		publishN(t, pub, "stubborn", 5)
		msgs, err := sub.Subscribe(t.Context(), "stubborn")
		require.NoError(t, err)
		stop := make(chan struct{})
		handled := make(chan struct{})
		nacks := 0
		go func() {
			defer close(handled)
			for {
				select {
				case m := <-msgs:
					if m.UUID == "m-002" {
						nacks++
						m.Nack()
						continue
					}
					m.Ack()
				case <-stop:
					return
				}
			}
		}()
		require.Eventually(t, func() bool { return db.count(t, "stubborn") == 1 }, 10*time.Second, 20*time.Millisecond,
			"the four acked messages are deleted while the fifth is still being nacked")
		close(stop)
		<-handled
		require.Positive(t, nacks)
	})
}

// TestStoppingInTheMiddleOfAWideBatchLosesNothing: a Subscriber closed while handlers hold part
// of its consumers' batches deletes the acked messages and leaves the others, which the next
// Subscriber hands out, each once.
func TestStoppingInTheMiddleOfAWideBatchLosesNothing(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.Consumers = 2
		config.BatchSize = 10
		pub, err := NewPublisher(context.Background(), config, nil)
		require.NoError(t, err)
		defer pub.Close()
		sent := publishN(t, pub, "wide-half", 10)

		sub, err := NewSubscriber(context.Background(), config, nil)
		require.NoError(t, err)
		msgs, err := sub.Subscribe(context.Background(), "wide-half")
		require.NoError(t, err)
		acked := map[string]bool{}
		for i := range sent {
			m := next(t, msgs)
			if i%2 == 0 {
				m.Ack()
				acked[m.UUID] = true
			} // the others are held, never acked
		}
		require.NoError(t, sub.Close())
		require.Equal(t, 5, db.count(t, "wide-half"), "the acked are deleted, the rest kept")

		sub2, err := NewSubscriber(context.Background(), config, nil)
		require.NoError(t, err)
		defer sub2.Close()
		msgs, err = sub2.Subscribe(t.Context(), "wide-half")
		require.NoError(t, err)
		for range 5 {
			m := next(t, msgs)
			require.False(t, acked[m.UUID], "%s was acked before the stop", m.UUID)
			m.Ack()
		}
		nothing(t, msgs, 200*time.Millisecond)
	})
}

// TestPublisherWakesIdleConsumers: consumers whose poll is an hour away take a message as soon
// as their Publisher (or a forwarder on it) commits it, on the same table's topic.
func TestPublisherWakesIdleConsumers(t *testing.T) {
	t.Parallel()
	e := newExactlyOnce(t)
	config := e.config()
	config.PollInterval = time.Hour
	pub, sub := newPubSub(t, config)
	msgs, err := sub.Subscribe(t.Context(), "awake")
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // the consumer looked, found nothing, and sleeps
	require.NoError(t, pub.Publish("awake", message.NewMessage("now", nil)))
	m := next(t, msgs)
	require.Equal(t, "now", m.UUID)
	m.Ack()

	// A subscriber of the Publisher's own, on a destination the forwarder writes to.
	f, err := NewExactlyOnceForwarder(context.Background(), pub, e.store, nil)
	require.NoError(t, err)
	recv, err := pub.NewSubscriber(context.Background(), config, nil)
	require.NoError(t, err)
	defer recv.Close()
	arrivals, err := recv.Subscribe(t.Context(), "woken")
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	to, out := e.timeout(t, "w-1", "woken")
	removed, err := f.Forward(context.Background(), to, out)
	require.NoError(t, err)
	require.True(t, removed)
	m = next(t, arrivals)
	require.Equal(t, "w-1", m.UUID)
	m.Ack()
}

// TestForwardManyRemovesAndPublishesTogether: a batch over several destinations publishes the
// messages of exactly the timeouts it removed, in order per destination, once.
func TestForwardManyRemovesAndPublishesTogether(t *testing.T) {
	t.Parallel()
	e := newExactlyOnce(t)
	f := e.forwarder(t)
	ctx := context.Background()
	var fs []satellites.Forwarding
	for i := range 30 {
		dest := []string{"pay", "ship", "bill"}[i%3]
		to, msg := e.timeout(t, fmt.Sprintf("b-%02d", i), dest)
		fs = append(fs, satellites.Forwarding{Timeout: to, Message: msg})
	}
	// Two are gone already: dispatched elsewhere, or cancelled.
	for _, id := range []string{"b-04", "b-05"} {
		_, err := e.store.Cancel(ctx, id)
		require.NoError(t, err)
	}
	removed, err := f.ForwardMany(ctx, fs)
	require.NoError(t, err)
	require.Len(t, removed, 28)
	require.NotContains(t, removed, "b-04")
	require.Equal(t, 10, e.count(t, "pay"))
	require.Equal(t, 9, e.count(t, "ship"))
	require.Equal(t, 9, e.count(t, "bill"))
	for _, fw := range fs {
		require.False(t, e.stored(t, fw.Timeout.ID))
	}

	removed, err = f.ForwardMany(ctx, fs)
	require.NoError(t, err)
	require.Empty(t, removed, "all gone: nothing removed")
	require.Equal(t, 10, e.count(t, "pay"), "and nothing published again")

	msgs, err := e.sub.Subscribe(t.Context(), "ship")
	require.NoError(t, err)
	for _, want := range []string{"b-01", "b-07", "b-10", "b-13", "b-16", "b-19", "b-22", "b-25", "b-28"} {
		got := next(t, msgs)
		require.Equal(t, want, got.UUID, "in the batch's order")
		require.Equal(t, "payload "+want, string(got.Payload))
		require.Equal(t, message.Metadata{"h": "ü"}, got.Metadata)
		got.Ack()
	}
}

// TestCrashBetweenForwardManyAndCommitPublishesNothing: a batch whose transaction dies after the
// messages were written takes all of them back and keeps every timeout; the dispatch
// satellite's next attempt forwards each exactly once.
func TestCrashBetweenForwardManyAndCommitPublishesNothing(t *testing.T) {
	t.Parallel()
	e := newExactlyOnce(t)
	admin := e.open(t)
	f := e.forwarder(t)
	var fs []satellites.Forwarding
	for i := range 10 {
		to, msg := e.timeout(t, fmt.Sprintf("c-%d", i), "crashed")
		fs = append(fs, satellites.Forwarding{Timeout: to, Message: msg})
	}
	var published int
	f.beforeCommit = func(ctx context.Context, tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM "watermill_crashed"`).Scan(&published); err != nil {
			return err
		}
		var pid int
		if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		_, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid)
		return err
	}
	removed, err := f.ForwardMany(context.Background(), fs)
	require.Error(t, err)
	require.Empty(t, removed)
	require.Equal(t, 10, published, "published inside the transaction")
	require.Zero(t, e.count(t, "crashed"), "and taken back with it")
	for _, fw := range fs {
		require.True(t, e.stored(t, fw.Timeout.ID), "%s kept", fw.Timeout.ID)
	}

	// The redelivered dispatcher messages: forwarded once.
	f.beforeCommit = nil
	removed, err = f.ForwardMany(context.Background(), fs)
	require.NoError(t, err)
	require.Len(t, removed, 10)
	require.Equal(t, 10, e.count(t, "crashed"))
	removed, err = f.ForwardMany(context.Background(), fs)
	require.NoError(t, err)
	require.Empty(t, removed)
	require.Equal(t, 10, e.count(t, "crashed"), "a second redelivery forwards nothing")
}

// TestRacingBatchForwardersPublishEachOnce: two instances forwarding overlapping batches at once
// publish every message exactly once.
func TestRacingBatchForwardersPublishEachOnce(t *testing.T) {
	t.Parallel()
	const count = 300
	e := newExactlyOnce(t)
	fa, fb := e.forwarder(t), e.forwarder(t)
	var all []satellites.Forwarding
	for i := range count {
		to, msg := e.timeout(t, fmt.Sprintf("r-%03d", i), "raced-many")
		all = append(all, satellites.Forwarding{Timeout: to, Message: msg})
	}
	results := make(chan []string, 2*count/50)
	errs := make(chan error, 2*count/50)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for start := 0; start < count; start += 50 {
			for i, f := range []*ExactlyOnceForwarder{fa, fb} {
				// b takes the batches shifted by 25, so that each overlaps two of a's.
				lo := min(count, start+25*i)
				hi := min(count, lo+50)
				go func() {
					r, err := f.ForwardMany(context.Background(), all[lo:hi])
					errs <- err
					results <- r
				}()
			}
		}
	}()
	<-done
	removed := map[string]int{}
	for range 2 * count / 50 {
		require.NoError(t, <-errs)
		for _, id := range <-results {
			removed[id]++
		}
	}
	require.Len(t, removed, count, "each removed")
	for id, n := range removed {
		require.Equal(t, 1, n, "%s removed once", id)
	}
	var rows, distinct int
	require.NoError(t, e.open(t).QueryRowContext(context.Background(),
		`SELECT COUNT(*), COUNT(DISTINCT uuid) FROM "watermill_raced-many"`).Scan(&rows, &distinct))
	require.Equal(t, count, rows, "each published once")
	require.Equal(t, count, distinct)
}
