package rabbitmq_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/internal/nativemigrate"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, rabbitmq.Config{}.Validate(), "URL is required")
	err := rabbitmq.Config{URL: "kafka://user:hunter2@host/"}.Validate()
	require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	require.NotContains(t, err.Error(), "hunter2")
	ok := "amqp://guest:guest@127.0.0.1:5672/"
	require.NoError(t, rabbitmq.Config{URL: ok}.Validate())
	require.ErrorContains(t, rabbitmq.Config{URL: ok, ChannelPoolSize: -1}.Validate(), "ChannelPoolSize")
	require.ErrorContains(t, rabbitmq.Config{URL: ok, QueueType: "lazy"}.Validate(), `queue type "lazy"`)
	for _, prefix := range []string{"has space", "amq.reserved", "wild*", "hash#", strings.Repeat("p", 187)} {
		require.ErrorIs(t, rabbitmq.Config{URL: ok, Prefix: prefix}.Validate(), rabbitmq.ErrInvalidConfig, prefix)
	}
}

// TestTheLongestPrefixLeavesRoomForEveryName: every name and routing key a topology uses fits
// AMQP's 255 bytes with the longest prefix accepted. (With prefixes of 187 to 200 bytes, once
// accepted, the probe queue's name could not end a routing key, and verify's probes failed.)
func TestTheLongestPrefixLeavesRoomForEveryName(t *testing.T) {
	t.Parallel()
	prefix := strings.Repeat("p", 186)
	topo, err := nativedelay.NewTopology(prefix, "")
	require.NoError(t, err)
	for _, name := range []string{topo.Exchange(27), topo.Queue(27), topo.DeliveryExchange(), topo.ProbeQueue()} {
		require.LessOrEqual(t, len(name), 255, name)
	}
	key, err := nativedelay.RoutingKey(nativedelay.MaxDelaySeconds, topo.ProbeQueue())
	require.NoError(t, err)
	require.Len(t, key, 255)
}

func TestTopologyNames(t *testing.T) {
	t.Parallel()
	topo, err := nativedelay.NewTopology("", "")
	require.NoError(t, err)
	require.Equal(t, "timeoutmill", topo.Prefix())
	require.Equal(t, rabbitmq.Quorum, topo.QueueType())
	require.Equal(t, "timeoutmill.delay-level-27", topo.Exchange(27))
	require.Equal(t, "timeoutmill.delay-level-03", topo.Queue(3))
	require.Equal(t, "timeoutmill.delay-delivery", topo.DeliveryExchange())
	require.Equal(t, "timeoutmill.delay-probes", topo.ProbeQueue())

	args := topo.QueueArguments(3)
	require.Equal(t, int64(8000), args["x-message-ttl"])
	require.Equal(t, "timeoutmill.delay-level-02", args["x-dead-letter-exchange"])
	require.Equal(t, "at-least-once", args["x-dead-letter-strategy"])
	require.Equal(t, "reject-publish", args["x-overflow"], "at-least-once needs it")
	require.Equal(t, "timeoutmill.delay-delivery", topo.QueueArguments(0)["x-dead-letter-exchange"])

	classic, err := nativedelay.NewTopology("app", rabbitmq.Classic)
	require.NoError(t, err)
	require.Equal(t, "classic", classic.QueueArguments(5)["x-queue-type"])
	require.NotContains(t, classic.QueueArguments(5), "x-dead-letter-strategy")
}

// handoverless is a store without persistence.Handover.
type handoverless struct{ seam }

func TestMigrationConfigValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := nativemigrate.Migrate(ctx, nativemigrate.MigrationConfig{})
	require.ErrorContains(t, err, "Store is required")
	_, err = nativemigrate.Migrate(ctx, nativemigrate.MigrationConfig{Store: memory.New()})
	require.ErrorContains(t, err, "Publisher is required")
	_, err = nativemigrate.Check(ctx, nativemigrate.MigrationConfig{Store: handoverless{memory.New()}, Publisher: &rabbitmq.Publisher{}})
	require.ErrorIs(t, err, persistence.ErrUnsupported)
	require.ErrorContains(t, err, "does not implement persistence.Handover")
}
