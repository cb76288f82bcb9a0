package acceptance

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/amqpmarshal"
	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// jamDelay puts a message in delay level 2 alone (4 s = binary 100): the orphans and the live
// messages of these tests all leave the levels from the queue of level 2.
const jamDelay = 4 * time.Second

// orphans are the messages delayed for a destination queue deleted while they wait: 40, more
// than the 32 a quorum level's dead-letter worker holds before it stops passing anything on.
const orphans = 40

// deadLetterResend bounds the time a quorum level's dead-letter worker takes to move a message on:
// it retries one it could not route, or whose confirm it did not get (seen under the parallel
// race suite), 3 minutes later; a minute more for a busy machine.
const deadLetterResend = 4 * time.Minute

// nativeCLI runs the timeoutmill binary's native commands against the test's infrastructure.
func (e *nativeEnv) cli(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	args = append(args, "--transport", e.url, "--delay-prefix", e.prefix)
	out, err := exec.Command(bin, args...).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	require.NoError(t, err, "%s", out)
	return 0, string(out)
}

// messages counts the ready messages of queue.
func (e *nativeEnv) messages(t *testing.T, queue string) int {
	t.Helper()
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

// awaitMessages waits until queue holds want ready messages (messages given back reach the count
// a moment later), and fails if it does not within.
func (e *nativeEnv) awaitMessages(t *testing.T, queue string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for got := e.messages(t, queue); got != want; got = e.messages(t, queue) {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d messages, not %d", queue, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deleteQueue deletes queue, as an operator decommissioning an endpoint does.
func (e *nativeEnv) deleteQueue(t *testing.T, queue string) {
	t.Helper()
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDelete(queue, false, false, false)
	require.NoError(t, err)
}

// delayed publishes n messages delayed by d to dest, each marked just before it is published,
// and returns the time each is due at the latest, by id.
func (e *nativeEnv) delayed(t *testing.T, dest string, n int, d time.Duration) map[string]time.Time {
	t.Helper()
	due := map[string]time.Time{}
	for i := 0; i < n; i++ {
		msg := message.NewMessage(watermill.NewUUID(), []byte(dest))
		msg.Metadata.Set("n", string(rune('a'+i%26)))
		timeouts.DeliverAfter(msg, d)
		due[msg.UUID] = time.Now().Add(d)
		require.NoError(t, e.pub.Publish(dest, msg))
	}
	return due
}

// TestNativeDeletedDestinationNeverBlocksALevel is issue 18's case: a destination is deleted
// while 40 of its messages wait in one delay level, then 20 messages go through the same level
// to a live destination. Without the guard the 40 are held by the level's dead-letter worker,
// which stops at 32, and none of the 20 arrives (the broker retries the held messages every 3
// minutes); with it, the 40 wait in the unroutable queue, where `native unroutable list` shows
// them and `native unroutable replay` delivers them once their queue is back.
func TestNativeDeletedDestinationNeverBlocksALevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newNativeEnv(t)
	bin := nativeBinary(t)
	gone := e.queue(t, "decommissioned")
	live := e.queue(t, "live")
	require.NoError(t, e.pub.EnsureDestinations(ctx, gone, live))
	arrivals := e.receive(t, live)

	lost := e.delayed(t, gone, orphans, jamDelay)
	e.deleteQueue(t, gone)
	start := time.Now()
	due := e.delayed(t, live, 20, jamDelay)

	arrivals.wait(t, 20, jamDelay+nativeLateBound+5*time.Second)
	var latest time.Duration
	for id, at := range due {
		got, _, _ := arrivals.first(id)
		require.False(t, got.Before(at), "arrived %s early", at.Sub(got))
		require.Less(t, got.Sub(at), nativeLateBound, "on time")
		latest = max(latest, got.Sub(at))
	}
	require.Empty(t, arrivals.duplicates())

	e.awaitMessages(t, e.topo.UnroutableQueue(), orphans, deadLetterResend) // the messages of the deleted queue
	t.Logf("%d of %d live messages sent through the level of %d orphans arrived, the latest %s after due (%s after the first was sent); all %d orphans in %s",
		arrivals.distinct(), len(due), orphans, latest.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), orphans, e.topo.UnroutableQueue())

	// Visible: verify fails naming them, list names their destination.
	code, out := e.cli(t, bin, "native", "verify")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "queue "+e.topo.UnroutableQueue()+" holds 40 message(s) whose destination queue was gone")
	require.NotContains(t, out, "stuck", "no level is blocked")
	code, out = e.cli(t, bin, "native", "unroutable", "list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, gone+": 40 (queue missing)")
	e.awaitMessages(t, e.topo.UnroutableQueue(), orphans, 30*time.Second) // listing takes nothing: what it read goes back

	// Replaying while the queue is missing leaves them where they are.
	code, out = e.cli(t, bin, "native", "unroutable", "replay")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "0 message(s) replayed, 40 stay")
	e.awaitMessages(t, e.topo.UnroutableQueue(), orphans, 30*time.Second)

	// The endpoint comes back: replay delivers every one, once, as it was sent.
	back := e.queue(t, "decommissioned")
	require.Equal(t, gone, back)
	returned := e.receive(t, gone)
	code, out = e.cli(t, bin, "native", "unroutable", "replay", "--destination", gone)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "40 message(s) replayed, 0 stay")
	returned.wait(t, orphans, 30*time.Second)
	for id := range lost {
		_, msg, ok := returned.first(id)
		require.True(t, ok, "message %s replayed", id)
		require.Equal(t, gone, string(msg.Payload))
		require.NotEmpty(t, msg.Metadata.Get("n"), "headers intact")
	}
	require.Empty(t, returned.duplicates())
	e.awaitMessages(t, e.topo.UnroutableQueue(), 0, 30*time.Second)
	code, out = e.cli(t, bin, "native", "verify")
	require.Equal(t, 0, code, out)
}

// olderTopology turns the test's infrastructure into one an earlier version set up: no guard, and
// the probe queue and the given destinations bound straight to the delivery exchange.
func (e *nativeEnv) olderTopology(t *testing.T, destinations ...string) {
	t.Helper()
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDelete(e.topo.UnroutableQueue(), false, false, false)
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDelete(e.topo.UnroutableExchange(), false, false))
	require.NoError(t, ch.ExchangeDelete(e.topo.DestinationsExchange(), false, false)) // and every binding to and from it
	for _, q := range append([]string{e.topo.ProbeQueue()}, destinations...) {
		require.NoError(t, ch.QueueBind(q, nativedelay.DestinationBindingKey(q), e.topo.DeliveryExchange(), false, nil))
	}
}

// TestNativeOlderTopologyIsReportedAndGuarded runs verify and setup on infrastructure an earlier
// version set up: verify says the guard is missing and, once a deleted destination's messages
// hold a level, that the level is stuck; setup adds the guard (twice: idempotent), on the
// exchanges and queues that are there, and a Publisher moves a destination through it on its
// first message, after which a deleted destination no longer holds anything.
func TestNativeOlderTopologyIsReportedAndGuarded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newNativeEnv(t)
	bin := nativeBinary(t)
	gone := e.queue(t, "decommissioned")
	live := e.queue(t, "live")
	old := e.queue(t, "old")
	e.olderTopology(t, gone, live, old)

	code, out := e.cli(t, bin, "native", "verify")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "exchange "+e.topo.DestinationsExchange()+" is missing (the guard: without it, a message whose destination queue was deleted")
	require.Contains(t, out, "queue "+e.topo.UnroutableQueue()+" is missing")
	require.Contains(t, out, "`timeoutmill native setup` adds it")
	require.NotContains(t, out, "stuck")

	// A Publisher of an earlier version sent 40 messages to gone, which is deleted while they
	// wait: they jam level 2, and verify says so.
	lost := e.rawDelayed(t, gone, orphans, 2)
	e.deleteQueue(t, gone)
	time.Sleep(jamDelay + time.Second) // until they are held
	start := time.Now()
	code, out = e.cli(t, bin, "native", "verify")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "queue "+e.topo.Queue(2)+" is stuck")
	require.Equal(t, 1, strings.Count(out, "is stuck"), "only level 2: %s", out)
	t.Logf("verify found level 2 stuck in %s", time.Since(start).Round(time.Millisecond))

	for range 2 {
		code, out = e.cli(t, bin, "native", "setup")
		require.Equal(t, 0, code, out)
	}
	// The messages held already stay held (see the recovery below); the guard is there.
	code, out = e.cli(t, bin, "native", "verify")
	require.Equal(t, 1, code, out)
	require.NotContains(t, out, "is missing", out)
	require.Contains(t, out, "queue "+e.topo.Queue(2)+" is stuck")

	// The documented recovery: re-create the queue and bind it; the broker delivers what it held
	// at its next attempt, within about 3 minutes.
	e.queue(t, "decommissioned")
	code, out = e.cli(t, bin, "native", "setup", "--destination", gone)
	require.Equal(t, 0, code, out)
	returned := e.receive(t, gone)
	start = time.Now()
	returned.wait(t, orphans, 2*deadLetterResend) // its next attempt, and one more should a confirm be slow
	for id := range lost {
		_, _, ok := returned.first(id)
		require.True(t, ok, "held message %s arrived", id)
	}
	t.Logf("the %d held messages arrived %s after the queue was re-created and bound", orphans, time.Since(start).Round(time.Second))
	code, out = e.cli(t, bin, "native", "verify")
	require.Equal(t, 0, code, out)

	// A destination an earlier version bound moves through the guard with the first message an
	// upgraded Publisher sends it: deleted then, it leaves nothing held.
	require.NoError(t, e.pub.EnsureDestinations(ctx, live))
	arrivals := e.receive(t, live)
	e.delayed(t, old, orphans, jamDelay)
	e.deleteQueue(t, old)
	due := e.delayed(t, live, 20, jamDelay)
	arrivals.wait(t, 20, jamDelay+nativeLateBound+5*time.Second)
	for id, at := range due {
		got, _, _ := arrivals.first(id)
		require.Less(t, got.Sub(at), nativeLateBound, "on time")
	}
	e.awaitMessages(t, e.topo.UnroutableQueue(), orphans, deadLetterResend)
}

// rawDelayed publishes n messages for dest into delay level `level` alone, as a Publisher of an
// earlier version did (the routing keys are the same), and returns their ids.
func (e *nativeEnv) rawDelayed(t *testing.T, dest string, n, level int) map[string]bool {
	t.Helper()
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Confirm(false))
	key, err := nativedelay.RoutingKey(1<<level, dest)
	require.NoError(t, err)
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		id := watermill.NewUUID()
		ids[id] = true
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), e.topo.Exchange(level), key, true, false,
			amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Headers: amqp.Table{amqpmarshal.UUIDHeader: id}, Body: []byte(dest)})
		require.NoError(t, err)
		ok, err := dc.WaitContext(context.Background())
		require.NoError(t, err)
		require.True(t, ok)
	}
	return ids
}
