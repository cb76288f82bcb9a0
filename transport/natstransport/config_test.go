package natstransport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{URL: "nats://127.0.0.1:4222"}
	c.setDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, defaultDurable, c.Durable)
	require.Equal(t, defaultConsumers, c.Consumers)
	require.Equal(t, 8, c.MaxAckPending)
	require.Equal(t, defaultAckWait, c.AckWait)
	require.Equal(t, 1, c.Replicas, "a single server takes only one replica")

	c = Config{URL: "nats://a:4222", Consumers: 4, Replicas: 3}
	c.setDefaults()
	require.Equal(t, 32, c.MaxAckPending)
	require.Equal(t, 3, c.Replicas, "a setting is kept")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, ok := range []Config{
		{URL: "nats://127.0.0.1:4222"},
		{URL: "nats://u:p@n1:4222, nats://u:p@n2:4222,tls://n3:4222", Replicas: 3},
		{URL: "nats://n1:4222", Replicas: 5},
	} {
		require.NoError(t, ok.Validate(), "%+v", ok)
	}
	for name, tc := range map[string]struct {
		config Config
		want   string
	}{
		"no URL":             {Config{}, "URL is required"},
		"bad scheme":         {Config{URL: "http://u:hunter2@host/"}, `URL scheme "http"`},
		"bad scheme in list": {Config{URL: "nats://n1:4222,amqp://u:hunter2@n2"}, `URL scheme "amqp"`},
		"too many consumers": {Config{URL: "nats://h", Consumers: 257}, "Consumers must be between 1 and 256"},
		"negative pending":   {Config{URL: "nats://h", MaxAckPending: -1}, "MaxAckPending must not be negative"},
		"negative ack wait":  {Config{URL: "nats://h", AckWait: -time.Second}, "AckWait must not be negative"},
		"negative replicas":  {Config{URL: "nats://h", Replicas: -1}, "Replicas must be between 1 and 5, got -1"},
		"too many replicas":  {Config{URL: "nats://h", Replicas: 6}, "Replicas must be between 1 and 5, got 6"},
		"durable with a dot": {Config{URL: "nats://h", Durable: "a.b"}, `Durable "a.b"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.config.Validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}
