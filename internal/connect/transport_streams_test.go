package connect_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
)

func TestOpenTransportStreamsSayWhichServerWithoutThePassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, url := range []string{
		"redis://app:topsecret@127.0.0.1:1/0?dial_timeout=1s&max_retries=-1",
		"nats://app:topsecret@127.0.0.1:1",
	} {
		_, err := connect.OpenTransport(ctx, url, watermill.NopLogger{})
		require.Error(t, err, url)
		require.False(t, connect.Permanent(err), "an unreachable server is worth retrying: %v", err)
		require.Contains(t, err.Error(), "127.0.0.1:1")
		require.NotContains(t, err.Error(), "topsecret")
	}
	for url, want := range map[string]string{
		"redis://app:topsecret@127.0.0.1:6379/notadb": "invalid database number",
		"nats://app:topsecret@127.0.0.1:port":         "not a URL",
	} {
		_, err := connect.OpenTransport(ctx, url, watermill.NopLogger{})
		require.ErrorIs(t, err, connect.ErrInvalid, url)
		require.True(t, connect.Permanent(err))
		require.ErrorContains(t, err, want)
		require.NotContains(t, err.Error(), "topsecret")
	}
	require.ErrorContains(t, connect.CheckExactlyOnce("redis://h/0", "postgres://h/db"), "Redis")
	require.ErrorContains(t, connect.CheckExactlyOnce("nats://h", "postgres://h/db"), "NATS")
}

// TestSetupCreatesStreamsAndConsumerGroupsNamedByTheWireContract: what `timeoutmill setup`
// creates on Redis (streams E.Timeouts, E.TimeoutsDispatcher and the error queue, each with the
// consumer group "timeoutmill") and on NATS (streams E_Timeouts, E_TimeoutsDispatcher, work-queue
// retention, capturing the subjects of the same names as the queues, and the error queue's).
func TestSetupCreatesStreamsAndConsumerGroupsNamedByTheWireContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url := testenv.RedisURL(t)
		endpoint := "connect-" + randomHex(t)
		tr, err := connect.OpenTransport(ctx, url, watermill.NopLogger{})
		require.NoError(t, err)
		defer tr.Close()
		require.NoError(t, tr.DeclareEndpoint(ctx, endpoint, endpoint+".error"))
		require.NoError(t, tr.DeclareEndpoint(ctx, endpoint, endpoint+".error"), "setup is idempotent")

		opts, err := redis.ParseURL(url)
		require.NoError(t, err)
		client := redis.NewClient(opts)
		defer client.Close()
		for _, stream := range []string{endpoint + ".Timeouts", endpoint + ".TimeoutsDispatcher", endpoint + ".error"} {
			groups, err := client.XInfoGroups(ctx, stream).Result()
			require.NoError(t, err, stream)
			require.Len(t, groups, 1)
			require.Equal(t, "timeoutmill", groups[0].Name)
			require.NoError(t, client.Del(ctx, stream).Err())
		}
	})
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		url := testenv.NATSURL(t)
		endpoint := "connect-" + randomHex(t)
		tr, err := connect.OpenTransport(ctx, url, watermill.NopLogger{})
		require.NoError(t, err)
		defer tr.Close()
		require.NoError(t, tr.DeclareEndpoint(ctx, endpoint, endpoint+".error"))
		require.NoError(t, tr.DeclareEndpoint(ctx, endpoint, endpoint+".error"), "setup is idempotent")

		conn, err := nats.Connect(url)
		require.NoError(t, err)
		defer conn.Close()
		js, err := conn.JetStream()
		require.NoError(t, err)
		for subject, retention := range map[string]nats.RetentionPolicy{
			endpoint + ".Timeouts":           nats.WorkQueuePolicy,
			endpoint + ".TimeoutsDispatcher": nats.WorkQueuePolicy,
			endpoint + ".error":              nats.LimitsPolicy,
		} {
			info, err := js.StreamInfo(natstransport.StreamName(subject))
			require.NoError(t, err, subject)
			require.Equal(t, []string{subject}, info.Config.Subjects)
			require.Equal(t, retention, info.Config.Retention, subject)
			require.Equal(t, nats.FileStorage, info.Config.Storage)
			require.Equal(t, 1, info.Config.Replicas, "one replica unless told: a single server takes no more")
			require.NoError(t, js.DeleteStream(info.Config.Name))
		}
	})
}

// TestStreamReplicasReachTheServer: --stream-replicas out of JetStream's range is refused before
// connecting, and replicas a single server cannot keep fail the setup with the server's reason,
// naming the stream, rather than create streams with fewer replicas than asked for.
func TestStreamReplicasReachTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := connect.OpenTransportWith(ctx, "nats://app:topsecret@127.0.0.1:1", connect.TransportOptions{Replicas: 7}, watermill.NopLogger{})
	require.ErrorIs(t, err, connect.ErrInvalid)
	require.True(t, connect.Permanent(err))
	require.ErrorContains(t, err, "Replicas must be between 1 and 5, got 7")
	require.NotContains(t, err.Error(), "topsecret")

	url := testenv.NATSURL(t)
	endpoint := "connect-" + randomHex(t)
	tr, err := connect.OpenTransportWith(ctx, url, connect.TransportOptions{Replicas: 3}, watermill.NopLogger{})
	require.NoError(t, err)
	defer tr.Close()
	err = tr.DeclareEndpoint(ctx, endpoint, endpoint+".error")
	require.ErrorContains(t, err, "stream for "+endpoint+".Timeouts")
	require.ErrorContains(t, err, "replicas > 1 not supported in non-clustered mode")
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
