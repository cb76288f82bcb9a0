package sqlpool

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
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

// inNetnsEnv marks the test binary re-run in a network namespace of its own.
const inNetnsEnv = "TIMEOUTMILL_SQLPOOL_IN_NETNS"

// TestDeadPeerIsNoticed: a server whose packets vanish (a crashed host, an address moved away) is
// noticed by the dialer's connections on their own, idle or with a request unanswered: the kernel
// ends them (ETIMEDOUT) about 15 s after the silence began, long before a reader's own deadline.
// Packets are dropped by a blackhole route in a network namespace of the test's own (unshare -n),
// so nothing outside it is touched.
func TestDeadPeerIsNoticed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the kernel to give up on a connection (about 15 s each)")
	}
	if os.Getenv(inNetnsEnv) == "" {
		cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run", "^TestDeadPeerIsNoticed$", "-test.v")
		cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil && !strings.Contains(string(out), "--- FAIL") {
			msg := fmt.Sprintf("needs a network namespace of its own (unshare -n, as root): %v\n%s", err, out)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		t.Logf("in a network namespace of its own:\n%s", out)
		require.NoError(t, err)
		return
	}
	ip := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	ip("link", "set", "lo", "up")
	l, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		var held []net.Conn // accepted and kept, silent
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					_ = c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	const readerDeadline = 40 * time.Second
	for _, request := range []bool{false, true} {
		c, err := DefaultKeepAlive().Dialer(time.Second).DialContext(t.Context(), "tcp", l.Addr().String())
		require.NoError(t, err)
		ip("route", "add", "blackhole", "127.0.0.2/32", "table", "local") // the server's packets vanish
		start := time.Now()
		if request {
			_, err = c.Write([]byte("SELECT 1"))
			require.NoError(t, err, "the kernel takes the write")
		}
		require.NoError(t, c.SetReadDeadline(start.Add(readerDeadline)))
		_, err = c.Read(make([]byte, 1))
		took := time.Since(start)
		ip("route", "del", "blackhole", "127.0.0.2/32", "table", "local")
		_ = c.Close()
		t.Logf("request unanswered %v: the connection ended after %s: %v", request, took.Round(time.Millisecond), err)
		require.ErrorIs(t, err, syscall.ETIMEDOUT, "ended by the kernel, not by the reader's deadline")
		require.Less(t, took, 25*time.Second, "noticed within about 15 s")
	}
}
