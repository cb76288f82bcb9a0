package acceptance

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

func TestNativeDelaysArriveOnTime(t *testing.T) {
	t.Parallel()
	e := newNativeEnv(t)
	dest := e.queue(t, "payments")
	arrivals := e.receive(t, dest)

	due := map[string]time.Time{}
	for _, d := range []time.Duration{time.Second, 3 * time.Second, 5 * time.Second} {
		msg := message.NewMessage(watermill.NewUUID(), []byte("after "+d.String()))
		msg.Metadata.Set("order", "42")
		timeouts.DeliverAfter(msg, d)
		due[msg.UUID] = time.Now().Add(d)
		require.NoError(t, e.pub.Publish(dest, msg))
	}
	arrivals.wait(t, 3, 5*time.Second+nativeLateBound+5*time.Second)
	for id, at := range due {
		got, msg, _ := arrivals.first(id)
		require.False(t, got.Before(at), "%s arrived %s early", msg.Payload, at.Sub(got))
		require.Less(t, got.Sub(at), nativeLateBound, "%s", msg.Payload)
		require.Equal(t, "42", msg.Metadata.Get("order"), "headers intact")
		require.NotContains(t, msg.Metadata, "x-death", "the broker's dead-letter history is dropped")
		t.Logf("%s: arrived %s after due", msg.Payload, got.Sub(at).Round(time.Millisecond))
	}
	require.Empty(t, arrivals.duplicates())
}

func TestNativeVerifyAfterSetupAndAfterAQueueIsDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newNativeEnv(t)
	require.NoError(t, e.pub.Verify(ctx))

	// The bindings, seen from outside, are NServiceBus.RabbitMQ v2's, but for the destinations':
	// 28 single-word wildcards and the queue, where NServiceBus's "#.<queue>" also matched queues
	// whose names end in ".<queue>".
	dest := e.queue(t, "billing")
	require.NoError(t, e.pub.EnsureDestinations(ctx, dest))
	if ctl := os.Getenv("TIMEOUTMILL_RABBITMQCTL"); ctl != "" {
		out, err := exec.Command(ctl, "-q", "list_bindings", "source_name", "destination_name", "routing_key", "--formatter", "json").Output()
		require.NoError(t, err)
		var bindings []struct {
			Source      string `json:"source_name"`
			Destination string `json:"destination_name"`
			Key         string `json:"routing_key"`
		}
		require.NoError(t, json.Unmarshal(out, &bindings))
		var got []string
		for _, b := range bindings {
			if strings.HasPrefix(b.Source, e.prefix) {
				got = append(got, b.Source+" -> "+b.Destination+" on "+b.Key)
			}
		}
		// Destinations are bound through the guard, whose alternate exchange keeps what it
		// cannot route in the unroutable queue.
		want := []string{
			e.topo.DeliveryExchange() + " -> " + e.topo.DestinationsExchange() + " on " + strings.Repeat("*.", nativedelay.Levels) + dest,
			e.topo.DestinationsExchange() + " -> " + dest + " on " + strings.Repeat("*.", nativedelay.Levels) + dest,
			e.topo.DeliveryExchange() + " -> " + e.topo.DestinationsExchange() + " on " + strings.Repeat("*.", nativedelay.Levels) + e.topo.ProbeQueue(),
			e.topo.DestinationsExchange() + " -> " + e.topo.ProbeQueue() + " on " + strings.Repeat("*.", nativedelay.Levels) + e.topo.ProbeQueue(),
			e.topo.UnroutableExchange() + " -> " + e.topo.UnroutableQueue() + " on ",
		}
		for level := 0; level < nativedelay.Levels; level++ {
			stars := strings.Repeat("*.", nativedelay.Levels-1-level)
			below := e.topo.DeliveryExchange()
			if level > 0 {
				below = e.topo.Exchange(level - 1)
			}
			want = append(want,
				e.topo.Exchange(level)+" -> "+e.topo.Queue(level)+" on "+stars+"1.#",
				e.topo.Exchange(level)+" -> "+below+" on "+stars+"0.#")
		}
		sort.Strings(got)
		sort.Strings(want)
		require.Equal(t, want, got)
	}

	ch, err := e.conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete(e.topo.Queue(16), false, false, false)
	require.NoError(t, err)
	require.NoError(t, ch.Close())
	err = e.pub.Verify(ctx)
	require.ErrorIs(t, err, rabbitmq.ErrTopology)
	require.ErrorContains(t, err, "queue "+e.topo.Queue(16)+" is missing")
	require.NoError(t, e.pub.Setup(ctx))
	require.NoError(t, e.pub.Verify(ctx))
}
