package acceptance

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/amqpmarshal"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// TestPlainAMQPClientWithOnlyTheContractHeaders plays a producer in another language: amqp091-go
// used directly, no Watermill, so no UUID header; just the two contract headers, a due time with
// an offset other than UTC, and a header of its own.
func TestPlainAMQPClientWithOnlyTheContractHeaders(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, "plain")
		startNode(t, e, "a", b.database(t, e.endpoint)(t), nil)
		dest := e.queue("reminders")
		delivered := receive(t, e, dest)

		due := time.Now().Add(1500 * time.Millisecond)
		e.publishRaw(t, wire.TimeoutsQueue(e.endpoint), amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			Body:         []byte(`{"remind":"order 7"}`),
			Headers: amqp.Table{
				wire.HeaderExpire:      due.In(time.FixedZone("", -7*3600)).Format(time.RFC3339Nano),
				wire.HeaderDestination: dest,
			},
		})
		got := await(t, delivered, lateBound)
		require.False(t, got.at.Before(due), "delivered %s early", due.Sub(got.at))
		require.Equal(t, `{"remind":"order 7"}`, string(got.msg.Payload))
		require.NotEmpty(t, got.msg.UUID, "a message without a UUID gets one")
		gotDue, err := wireparse.ParseExpire(got.msg.Metadata.Get(wire.HeaderDue))
		require.NoError(t, err, "the delivered message says the due time it was delivered for")
		require.True(t, wireparse.RoundUp(due).Equal(gotDue), "timeout.due %s for a due time of %s", gotDue, due)
		delete(got.msg.Metadata, wire.HeaderDue)
		require.Empty(t, got.msg.Metadata, "no other header was added or left behind")
		t.Logf("%s: no UUID, -07:00 offset: delivered %s after due under id %s", b.name, got.at.Sub(due).Round(time.Millisecond), got.msg.UUID)

		// With a message-id and AMQP properties: the id is kept (so a redelivery is recognised)
		// and so are the properties; a non-string header arrives as a string.
		e.publishRaw(t, wire.TimeoutsQueue(e.endpoint), amqp.Publishing{
			MessageId:     "legacy-42",
			ContentType:   "application/json",
			CorrelationId: "saga-7",
			Body:          []byte("{}"),
			Headers: amqp.Table{
				wire.HeaderExpire:      time.Now().Add(300 * time.Millisecond).UTC().Format(time.RFC3339Nano),
				wire.HeaderDestination: dest,
				"retries":              int32(2),
			},
		})
		got = await(t, delivered, lateBound)
		require.Equal(t, "legacy-42", got.msg.UUID)
		require.Equal(t, "2", got.msg.Metadata.Get("retries"))
		require.Equal(t, "application/json", got.msg.Metadata.Get(amqpmarshal.PropertyContentType))
		require.Equal(t, "saga-7", got.msg.Metadata.Get(amqpmarshal.PropertyCorrelationID))

		// The same message-id sent twice before it is due (a producer's retry after a lost
		// confirm) makes one timeout, not two.
		twice := amqp.Publishing{
			MessageId: "retried-1",
			Body:      []byte("once"),
			Headers: amqp.Table{
				wire.HeaderExpire:      time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano),
				wire.HeaderDestination: dest,
			},
		}
		e.publishRaw(t, wire.TimeoutsQueue(e.endpoint), twice)
		e.publishRaw(t, wire.TimeoutsQueue(e.endpoint), twice)
		got = await(t, delivered, lateBound)
		require.Equal(t, "retried-1", got.msg.UUID)
		requireNothing(t, delivered, 1500*time.Millisecond)
	})
}

// TestAMQPPublishFromAmqpTools sends a delayed message with Debian's amqp-publish (rabbitmq-c, a
// C client): the contract is usable from a shell.
func TestAMQPPublishFromAmqpTools(t *testing.T) {
	t.Parallel()
	tool, err := exec.LookPath("amqp-publish")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("amqp-publish is missing although CI is set: scripts/services.sh up installs amqp-tools")
		}
		t.Skip("amqp-publish is not installed (Debian's amqp-tools; scripts/services.sh up installs it)")
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, "cli")
		startNode(t, e, "a", b.database(t, e.endpoint)(t), nil)
		dest := e.queue("from-shell")
		delivered := receive(t, e, dest)

		due := time.Now().Add(time.Second)
		// amqp-tools reads the trailing "/" of the URL as the empty vhost: drop it.
		out, err := exec.Command(tool,
			"--url", strings.TrimSuffix(e.url, "/"),
			"--routing-key", wire.TimeoutsQueue(e.endpoint),
			"--persistent",
			"--content-type", "text/plain",
			"--header", wire.HeaderExpire+": "+due.UTC().Format(time.RFC3339Nano),
			"--header", wire.HeaderDestination+": "+dest,
			"--header", "origin: bash ✓",
			"--body", "sent from a shell",
		).CombinedOutput()
		require.NoError(t, err, "%s", out)

		got := await(t, delivered, lateBound)
		require.False(t, got.at.Before(due), "delivered %s early", due.Sub(got.at))
		require.Equal(t, "sent from a shell", string(got.msg.Payload))
		require.Equal(t, "bash ✓", got.msg.Metadata.Get("origin"))
		require.Equal(t, "text/plain", got.msg.Metadata.Get(amqpmarshal.PropertyContentType))
		require.NotEmpty(t, got.msg.UUID)
		t.Logf("%s: amqp-publish message delivered %s after due", b.name, got.at.Sub(due).Round(time.Millisecond))
	})
}
