package amqptransport

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{URL: "amqp://guest:guest@127.0.0.1:5672/"}
	c.setDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, defaultConnectionName, c.ConnectionName)
	require.Equal(t, defaultChannelPoolSize, c.ChannelPoolSize)
	require.Equal(t, defaultPrefetchCount, c.PrefetchCount)
	require.Equal(t, defaultDialTimeout, c.DialTimeout)
	require.NotNil(t, c.Reconnect)
	require.Equal(t, 5*time.Second, c.Reconnect.BackoffMaxInterval)

	cc := c.amqpConfig("publisher")
	require.Equal(t, "timeoutmill publisher", cc.Properties["connection_name"])
	require.Equal(t, DefaultHeartbeat, cc.Heartbeat)
	require.NotNil(t, cc.Dial, "connections send through internal/coalesce")
	c.Heartbeat = 2 * time.Second
	require.Equal(t, 2*time.Second, c.amqpConfig("subscriber").Heartbeat, "the configured heartbeat reaches the connection")
	b := c.backoff()
	require.Equal(t, 500*time.Millisecond, b.Initial)
	require.Equal(t, 5*time.Second, b.Max)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		config Config
		want   string
	}{
		"no URL":           {Config{}, "URL is required"},
		"bad scheme":       {Config{URL: "http://u:hunter2@host/"}, "URL http://u:xxxxx@host/"},
		"negative pool":    {Config{URL: "amqp://h/", ChannelPoolSize: -1}, "ChannelPoolSize must be positive"},
		"negative fetch":   {Config{URL: "amqp://h/", PrefetchCount: -1}, "PrefetchCount must be positive"},
		"huge prefetch":    {Config{URL: "amqp://h/", PrefetchCount: 70000}, "at most 65535"},
		"negative timeout": {Config{URL: "amqp://h/", DialTimeout: -time.Second}, "DialTimeout must be positive"},
		"negative beat":    {Config{URL: "amqp://h/", Heartbeat: -time.Second}, "Heartbeat must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := tc.config
			c.setDefaults()
			err := c.Validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

func TestUnparsableURLNeverShowsItsPassword(t *testing.T) {
	t.Parallel()
	// An unencoded '#' in the password makes url.Parse fail, and its error quotes the URL up to
	// the '#': "amqp://user:s3cr".
	c := Config{URL: "amqp://user:s3cr#t:pa%ss@rabbit.example:5672/vhost"}
	c.setDefaults()
	err := c.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.NotContains(t, err.Error(), "s3cr")
	require.NotContains(t, err.Error(), "pa%ss")
	var urlErr *url.Error
	require.True(t, errors.As(err, &urlErr), "the cause stays reachable: %v", err)
}
