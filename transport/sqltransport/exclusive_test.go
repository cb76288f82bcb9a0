package sqltransport

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/exclusive"
)

// subscribeExclusive subscribes to topic as its only consumer until the test ends.
func subscribeExclusive(t *testing.T, sub *Subscriber, topic string) (<-chan *message.Message, context.CancelFunc, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(exclusive.With(ctx), topic)
	if err != nil {
		cancel()
	}
	return msgs, cancel, err
}

// A subscription asked to be its topic's only consumer (as recoverability asks for a deferred
// queue) is refused at Subscribe while another Subscriber, with pools of its own as in another
// process, holds the topic; other topics are not; and the topic is free once the holder has
// stopped, or closed.
func TestAnExclusiveSubscriptionRefusesASecondConsumer(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		pub, first := newPubSub(t, db.config())
		_, second := newPubSub(t, db.config())
		msgs, stop, err := subscribeExclusive(t, first, "orders.Deferred.web-1")
		require.NoError(t, err)

		_, _, err = subscribeExclusive(t, second, "orders.Deferred.web-1")
		require.ErrorIs(t, err, exclusive.ErrInUse)
		require.ErrorContains(t, err, `"orders.Deferred.web-1"`)
		_, _, err = subscribeExclusive(t, second, "orders.Deferred.web-2")
		require.NoError(t, err, "another topic is another lock")

		sent := message.NewMessage(watermill.NewUUID(), []byte("to the only consumer"))
		require.NoError(t, pub.Publish("orders.Deferred.web-1", sent))
		got := next(t, msgs)
		require.Equal(t, sent.UUID, got.UUID)
		got.Ack()

		stop()
		require.Eventually(t, func() bool {
			_, _, err := subscribeExclusive(t, second, "orders.Deferred.web-1")
			return err == nil
		}, 10*time.Second, 50*time.Millisecond, "the topic is free once its subscription has stopped")

		require.NoError(t, second.Close())
		_, _, err = subscribeExclusive(t, first, "orders.Deferred.web-1")
		require.NoError(t, err, "the topic is free once its Subscriber has closed")
	})
}

// Tables of one name in two PostgreSQL schemas are two queues, and two locks.
func TestExclusiveLocksAreTheSchemas(t *testing.T) {
	t.Parallel()
	a, b := newDatabase(t, PostgreSQL), newDatabase(t, PostgreSQL)
	_, subA := newPubSub(t, a.config())
	_, subB := newPubSub(t, b.config())
	_, _, err := subscribeExclusive(t, subA, "orders.Deferred.web-1")
	require.NoError(t, err)
	_, _, err = subscribeExclusive(t, subB, "orders.Deferred.web-1")
	require.NoError(t, err, "the same topic in another schema")
}

// When the connection holding the lock is lost (a database restart, or here its session
// terminated), the subscription takes the lock again on a new connection.
func TestAnExclusiveSubscriptionTakesItsLockAgainAfterLosingItsConnection(t *testing.T) {
	t.Parallel()
	db := newDatabase(t, PostgreSQL)
	_, first := newPubSub(t, db.config())
	_, second := newPubSub(t, db.config())
	_, _, err := subscribeExclusive(t, first, "orders.Deferred.web-1")
	require.NoError(t, err)

	admin := db.open(t)
	var terminated int
	cfg := db.config()
	cfg.setDefaults()
	lock := newExclusiveLock(cfg.names(), "orders.Deferred.web-1")
	require.NoError(t, admin.QueryRowContext(context.Background(), `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = `+postgresLockKey,
		lock.schema, lock.table).Scan(&terminated))
	require.Equal(t, 1, terminated, "the session holding the lock")

	// Within a check interval or two the lock is held again, by first: second stays refused.
	time.Sleep(2*exclusiveCheckInterval + time.Second)
	_, _, err = subscribeExclusive(t, second, "orders.Deferred.web-1")
	require.ErrorIs(t, err, exclusive.ErrInUse)
}
