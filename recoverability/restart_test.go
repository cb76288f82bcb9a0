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
