package acceptance

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// TestFaultHostileInputErrorsToTheCaller: what a producer can be told at once is an error from
// Publish, before anything is sent: an unreadable delay header or an unusable topic on the
// timeout manager's publisher, and a delay beyond the native levels' maximum on the native
// RabbitMQ publisher.
func TestFaultHostileInputErrorsToTheCaller(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	bus := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	pub, err := timeouts.NewPublisher(bus, "caller")
	require.NoError(t, err)
	var refusals []string
	for name, tc := range map[string]struct {
		topic string
		md    map[string]string
	}{
		"garbage timeout.expire":      {"dest", map[string]string{wire.HeaderExpire: "tomorrow"}},
		"empty timeout.expire":        {"dest", map[string]string{wire.HeaderExpire: ""}},
		"year 10000":                  {"dest", map[string]string{wire.HeaderExpire: "10000-01-01T00:00:00Z"}},
		"no offset":                   {"dest", map[string]string{wire.HeaderExpire: "2099-01-01T00:00:00"}},
		"garbage Watermill delay key": {"dest", map[string]string{wire.HeaderWatermillDelayedUntil: "soon"}},
		"delayed to an empty topic":   {"", map[string]string{wire.HeaderExpire: wireparse.FormatExpire(time.Now().Add(time.Hour))}},
		"delayed to a control char":   {"a\nb", map[string]string{wire.HeaderExpire: wireparse.FormatExpire(time.Now().Add(time.Hour))}},
	} {
		msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
		for k, v := range tc.md {
			msg.Metadata.Set(k, v)
		}
		err := pub.Publish(tc.topic, msg)
		require.Error(t, err, name)
		refusals = append(refusals, name+": "+err.Error())
	}

	native, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: newEnv(t, "caller").url, Prefix: "fault-" + randomHex(t, 4)}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = native.Close() })
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	timeouts.DeliverAfter(msg, rabbitmq.MaxDelay+time.Hour)
	err = native.Publish("dest", msg)
	require.ErrorIs(t, err, rabbitmq.ErrDelayTooLong)
	refusals = append(refusals, "native delay of MaxDelay + 1 h: "+err.Error())
	faultLog(t, "%d refusals at Publish:\n  %s", len(refusals), strings.Join(refusals, "\n  "))
}
