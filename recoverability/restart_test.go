package recoverability_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/wire"
)

// A restart between two attempts loses neither the message nor its place in the schedule: the
// wait lives in the message, and the message in the deferred queue. GoChannel cannot keep a queue
// across a restart (see durableQueues), so this runs on durable in-process queues, as it would on
// AMQP or SQL.
func TestRestartBetweenRetriesStillRetries(t *testing.T) {
	t.Parallel()
	queues := newDurableQueues()
	cfg := baseConfig(queues)
	cfg.DurationToIgnoreOnFailure = []time.Duration{1500 * time.Millisecond, time.Minute}
	first := start(t, queues, cfg, func(int, *message.Message) error { return errRefused })

	msg := message.NewMessage(watermill.NewUUID(), []byte("survives a restart"))
	require.NoError(t, queues.Publish(workQueue, msg))
	failedAt := first.calls.waitCalls(t, msg.UUID, 1, 5*time.Second)[0].at
	time.Sleep(300 * time.Millisecond) // moved to the deferred queue and held there by its processor
	require.NoError(t, first.router.Close())
	require.Equal(t, 1, queues.Len(first.retries.DeferredQueue()), "the held message went back on the deferred queue")
	require.Zero(t, queues.Len(workQueue))

	second := start(t, queues, cfg, nil) // a new process: new Retries, new router, same queues
	calls := second.calls.waitCalls(t, msg.UUID, 1, 10*time.Second)
	require.Len(t, calls, 1)
	require.GreaterOrEqual(t, calls[0].at.Sub(failedAt), 1500*time.Millisecond, "the restart did not shorten the wait")
	require.Equal(t, "1", calls[0].metadata.Get(wire.HeaderRetryDelayedRetries), "the schedule goes on where it was")
	require.Equal(t, "survives a restart", string(msg.Payload))
	require.Len(t, first.calls.of(msg.UUID), 1)
}

// The start-up pass: what is due returns to the work queue at once, the rest when due, and the
// queue is not cycled meanwhile.
func TestStartUpPassReturnsWhatIsDueAndKeepsTheRest(t *testing.T) {
	t.Parallel()
	queues := newDurableQueues()
	cfg := baseConfig(queues)
	deferred := cfg.DeferredQueue
	dueSoon := time.Now().Add(2 * time.Second)
	overdue := waiting("overdue", time.Now().Add(-time.Minute))
	soon := waiting("soon", dueSoon)
	later := waiting("later", time.Now().Add(time.Hour))
	unmarked := message.NewMessage(watermill.NewUUID(), []byte("no ignore-until"))
	require.NoError(t, queues.Publish(deferred, later, overdue, soon, unmarked)) // left by the last run

	counting := &countingPublisher{Publisher: queues}
	cfg.Publisher = counting
	b := start(t, queues, cfg, nil)
	for _, m := range []*message.Message{overdue, unmarked} {
		c := b.calls.waitCalls(t, m.UUID, 1, 5*time.Second)[0]
		require.True(t, c.at.Before(dueSoon), "%s is returned by the start-up pass", m.Payload)
	}
	c := b.calls.waitCalls(t, soon.UUID, 1, 10*time.Second)[0]
	require.False(t, c.at.Before(dueSoon), "handled %s early", dueSoon.Sub(c.at))

	time.Sleep(300 * time.Millisecond)
	settled := counting.count(deferred)
	require.LessOrEqual(t, settled, 4, "each pass puts back what is not due, once")
	time.Sleep(time.Second)
	require.Equal(t, settled, counting.count(deferred), "no passes while nothing is due")
	require.Empty(t, b.calls.of(later.UUID))
}
