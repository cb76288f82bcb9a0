package sqlpool

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// socketOptions are the keepalive options the kernel has for a TCP connection.
type socketOptions struct {
	keepAlive, idle, interval, count, userTimeoutMS int
}

func optionsOf(t *testing.T, c net.Conn) socketOptions {
	t.Helper()
	tcp, ok := c.(*net.TCPConn)
	require.True(t, ok, "a TCP connection, got %T", c)
	raw, err := tcp.SyscallConn()
	require.NoError(t, err)
	var o socketOptions
	var errs []error
	require.NoError(t, raw.Control(func(fd uintptr) {
		get := func(level, opt int) int {
			v, err := syscall.GetsockoptInt(int(fd), level, opt)
			errs = append(errs, err)
			return v
		}
		o = socketOptions{
			keepAlive:     get(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE),
			idle:          get(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE),
			interval:      get(syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL),
			count:         get(syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT),
			userTimeoutMS: get(syscall.IPPROTO_TCP, tcpUserTimeout),
		}
	}))
	for _, err := range errs {
		require.NoError(t, err)
	}
	return o
}

// TestDialerSetsTheKernelsOptions: what the kernel has for a connection the dialer made, so that
// a peer that vanished is noticed after Idle + Count × Interval when idle, and after UserTimeout
// with data unacknowledged.
func TestDialerSetsTheKernelsOptions(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	for _, tc := range []struct {
		k    KeepAlive
		want socketOptions
	}{
		{DefaultKeepAlive(), socketOptions{keepAlive: 1, idle: 5, interval: 2, count: 4, userTimeoutMS: 15000}},
		{KeepAlive{Enabled: true, Idle: 30 * time.Second, Interval: 10 * time.Second, Count: 6, UserTimeout: 1500 * time.Millisecond},
			socketOptions{keepAlive: 1, idle: 30, interval: 10, count: 6, userTimeoutMS: 1500}},
	} {
		c, err := tc.k.Dialer(time.Second).DialContext(t.Context(), "tcp", l.Addr().String())
		require.NoError(t, err)
		got := optionsOf(t, c)
		_ = c.Close()
		require.Equal(t, tc.want, got)
	}
}

// TestPostgresPoolDialsWithKeepAlive: a pool Open makes on a real PostgreSQL has the options on
// its connections, with the DSN's libpq settings, and the server never sees those settings
// (it would refuse them as unknown session parameters).
func TestPostgresPoolDialsWithKeepAlive(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDSN(t)
	db, err := Open("pgx", dsn+"&keepalives_idle=7&keepalives_count=3&tcp_user_timeout=9000")
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	var got socketOptions
	require.NoError(t, conn.Raw(func(driverConn any) error {
		got = optionsOf(t, driverConn.(*stdlib.Conn).Conn().PgConn().Conn())
		return nil
	}))
	require.Equal(t, socketOptions{keepAlive: 1, idle: 7, interval: 2, count: 3, userTimeoutMS: 9000}, got)
	require.NoError(t, conn.PingContext(t.Context()))

	cc, err := PostgresConfig(dsn)
	require.NoError(t, err)
	require.Equal(t, DefaultConnectTimeout, cc.ConnectTimeout, "a connect timeout per host when the DSN sets none")
	cc, err = PostgresConfig(dsn + "&connect_timeout=3")
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, cc.ConnectTimeout, "the DSN's own wins")
}

// TestMySQLPoolDialsWithKeepAlive: the MariaDB pool dials with the store's own dialer (the
// driver's registry is left alone), takes the libpq settings out of the DSN, and connects.
func TestMySQLPoolDialsWithKeepAlive(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	cfg, err := gomysql.ParseDSN(dsn + "&keepalives_idle=7&tcp_user_timeout=9000")
	require.NoError(t, err)
	require.NoError(t, MySQLDialer(cfg))
	require.NotContains(t, cfg.Params, "keepalives_idle", "MariaDB would refuse it as an unknown system variable")
	require.NotContains(t, cfg.Params, "tcp_user_timeout")
	var got socketOptions
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			got = optionsOf(t, c)
		}
		return c, err
	}
	connector, err := gomysql.NewConnector(cfg)
	require.NoError(t, err)
	conn, err := connector.Connect(t.Context())
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.Equal(t, socketOptions{keepAlive: 1, idle: 7, interval: 2, count: 4, userTimeoutMS: 9000}, got)

	db, err := Open("mysql", dsn+"&keepalives_idle=7")
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.PingContext(t.Context()), "the server never sees the setting")
}
