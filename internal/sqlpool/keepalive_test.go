package sqlpool

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTakeKeepAliveDefaults(t *testing.T) {
	t.Parallel()
	params := map[string]string{"application_name": "orders"}
	k, err := TakeKeepAlive(params)
	require.NoError(t, err)
	require.Equal(t, DefaultKeepAlive(), k)
	require.Equal(t, KeepAlive{Enabled: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 4, UserTimeout: 15 * time.Second}, k)
	require.Equal(t, map[string]string{"application_name": "orders"}, params, "other settings are left to the driver")

	k, err = TakeKeepAlive(nil) // a DSN without parameters
	require.NoError(t, err)
	require.Equal(t, DefaultKeepAlive(), k)
}

func TestTakeKeepAliveReadsAndRemovesLibpqSettings(t *testing.T) {
	t.Parallel()
	params := map[string]string{
		"keepalives_idle": "30", "keepalives_interval": "10", "keepalives_count": "6", "tcp_user_timeout": "45000",
		"application_name": "orders",
	}
	k, err := TakeKeepAlive(params)
	require.NoError(t, err)
	require.Equal(t, KeepAlive{Enabled: true, Idle: 30 * time.Second, Interval: 10 * time.Second, Count: 6, UserTimeout: 45 * time.Second}, k)
	require.Equal(t, map[string]string{"application_name": "orders"}, params, "the server would refuse them as session settings")

	k, err = TakeKeepAlive(map[string]string{"keepalives": "0", "tcp_user_timeout": "0"})
	require.NoError(t, err)
	require.False(t, k.Enabled)
	require.Zero(t, k.UserTimeout)
}

func TestTakeKeepAliveRefusesMalformedSettings(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"keepalives_idle": "0", "keepalives_interval": "2s", "keepalives_count": "-1", "tcp_user_timeout": "soon", "keepalives": "yes",
	} {
		_, err := TakeKeepAlive(map[string]string{name: value})
		require.ErrorContains(t, err, name+`="`+value+`"`, "the error names the setting")
	}
}

func TestDialerWithoutKeepAlive(t *testing.T) {
	t.Parallel()
	d := KeepAlive{Enabled: false}.Dialer(3 * time.Second)
	require.Equal(t, 3*time.Second, d.Timeout)
	require.False(t, d.KeepAliveConfig.Enable)
	require.Negative(t, d.KeepAlive, "keepalive off, not Go's default of 15 s")
	require.Nil(t, d.Control, "no TCP_USER_TIMEOUT when it is 0")
}
