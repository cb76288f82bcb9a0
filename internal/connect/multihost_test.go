package connect_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
)

// silentServer accepts TCP connections and never answers, as a host that swallows a connection
// does: without a connect timeout a client waits for its greeting for ever. It returns its port.
func silentServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, silent
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}

// refusedPort is a port nothing listens on.
func refusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// TestMultiHostDSNWithoutAReachableHostIsAnError: a PostgreSQL DSN listing several hosts none of
// which answers ends in an error that names each host and hides the password, within the
// connect timeout per host (the DSN's, or the default when it sets none): never a hang, even on
// a host that accepts the connection and then says nothing.
func TestMultiHostDSNWithoutAReachableHostIsAnError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, params string
		bound        time.Duration // generous: what matters is that it ends
	}{
		{"the DSN's connect_timeout", "&connect_timeout=1", 30 * time.Second},
		{"the default connect timeout", "", 60 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			silent, refused := silentServer(t), refusedPort(t)
			dsn := fmt.Sprintf("postgres://app:s3cret-pw@127.0.0.1:%d,127.0.0.1:%d/orders?sslmode=disable&target_session_attrs=read-write%s",
				silent, refused, tc.params)
			ctx, cancel := context.WithTimeout(context.Background(), 2*tc.bound)
			defer cancel()
			start := time.Now()
			store, err := connect.OpenStore(ctx, dsn, "orders")
			took := time.Since(start)
			if store != nil {
				_ = store.Close()
			}
			require.Error(t, err)
			require.Less(t, took, tc.bound, "an error, not a hang: %v", err)
			require.NoError(t, ctx.Err(), "the store gave up by itself, not because the test's deadline passed")
			text := err.Error()
			require.NotContains(t, text, "s3cret-pw")
			require.Contains(t, text, "app:xxxxx@")
			for _, port := range []int{silent, refused} {
				require.Contains(t, text, "127.0.0.1:"+strconv.Itoa(port), "the error names each host")
			}
			require.False(t, connect.Permanent(err), "an unreachable server may come back: the service retries")
			t.Logf("after %s: %s", took.Round(time.Millisecond), strings.ReplaceAll(text, "\n", " "))
		})
	}
}

func TestRedactMultiHostDSN(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://app:xxxxx@db1:5432,db2:5432/x?target_session_attrs=read-write",
		connect.Redact("postgres://app:s3cret@db1:5432,db2:5432/x?target_session_attrs=read-write"))
}
