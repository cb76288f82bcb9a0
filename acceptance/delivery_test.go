package acceptance

import (
	"bytes"
	"crypto/rand"
	"maps"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// lateBound is how late a due message may arrive: generous, because the tests run in parallel
// under the race detector on two cores. It is not a speed assertion.
const lateBound = 10 * time.Second

func TestDelayedByTwoSeconds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, "delay2s")
		store := b.database(t, e.endpoint)(t)
		n := startNode(t, e, "a", store, nil)
		dest := e.queue("payments")
		delivered := receive(t, e, dest)

		msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 42"))
		due := time.Now().Add(2 * time.Second)
		timeouts.DeliverAt(msg, due)
		require.NoError(t, n.manager.Publisher().Publish(dest, msg))

		got := await(t, delivered, 2*time.Second+lateBound)
		require.Equal(t, msg.UUID, got.msg.UUID)
		require.Equal(t, "charge order 42", string(got.msg.Payload))
		require.False(t, got.at.Before(due), "delivered %s early", due.Sub(got.at))
		require.Less(t, got.at.Sub(due), lateBound)
		for _, h := range []string{wire.HeaderExpire, wire.HeaderDestination} {
			require.NotContains(t, got.msg.Metadata, h, "routing headers are removed on delivery")
		}
		t.Logf("%s: due %s, delivered %s after it", b.name, due.Format(time.RFC3339Nano), got.at.Sub(due).Round(time.Millisecond))
		requireNothing(t, delivered, 500*time.Millisecond)
		require.Eventually(t, func() bool { return pending(t, store) == 0 }, 5*time.Second, 20*time.Millisecond,
			"a delivered timeout leaves the store")
	})
}

func TestDelayedIntoThePast(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, "past")
		startNode(t, e, "a", b.database(t, e.endpoint)(t), nil)
		dest := e.queue("audit")
		delivered := receive(t, e, dest)

		// Through the Timeouts queue, as a producer that does not check the time would send it
		// (timeouts.Publisher itself sends a message already due straight to its topic).
		e.publishRaw(t, wire.TimeoutsQueue(e.endpoint), amqp.Publishing{
			MessageId: watermill.NewUUID(),
			Body:      []byte("an hour late"),
			Headers: amqp.Table{
				wire.HeaderExpire:      time.Now().Add(-time.Hour).Format(time.RFC3339),
				wire.HeaderDestination: dest,
			},
		})
		sent := time.Now()
		got := await(t, delivered, lateBound)
		require.Equal(t, "an hour late", string(got.msg.Payload))
		t.Logf("%s: a timeout an hour overdue was delivered %s after it was sent", b.name, got.at.Sub(sent).Round(time.Millisecond))

		// And through timeouts.Publisher, which sends it directly.
		direct := message.NewMessage(watermill.NewUUID(), []byte("direct"))
		timeouts.DeliverAt(direct, time.Now().Add(-time.Minute))
		require.NoError(t, startNode(t, e, "b", b.database(t, e.endpoint+"b")(t), nil).manager.Publisher().Publish(dest, direct))
		got = await(t, delivered, lateBound)
		require.Equal(t, direct.UUID, got.msg.UUID)
		require.NotContains(t, got.msg.Metadata, wire.HeaderExpire)
	})
}

func TestNonASCIIHeadersAndAOneMiBBodySurviveByteForByte(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, "bytes")
		n := startNode(t, e, "a", b.database(t, e.endpoint)(t), nil)
		dest := e.queue("archive")
		delivered := receive(t, e, dest)

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
		want := message.Metadata(maps.Clone(headers))
		want[wire.HeaderDue] = msg.Metadata.Get(wire.HeaderExpire) // the due time it was delivered for
		require.Equal(t, want, got.msg.Metadata, "every header as sent, less the routing headers, plus timeout.due")
	})
}
