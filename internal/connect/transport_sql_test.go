package connect_test

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

func TestCheckExactlyOnce(t *testing.T) {
	t.Parallel()
	require.NoError(t, connect.CheckExactlyOnce("postgres://app:pw@db/app", "postgresql://app:pw@db/app"))
	for why, urls := range map[string][2]string{
		"is RabbitMQ":           {"amqp://guest:topsecret@127.0.0.1:5672/", "postgres://app:topsecret@db/app"},
		"transport mysql://app": {"mysql://app:topsecret@db/app", "mysql://app:topsecret@db/app"},
		"is SQLite":             {"postgres://app:topsecret@db/app", "sqlite:///var/lib/t.db"},
		"store mysql://app":     {"postgres://app:topsecret@db/app", "mysql://app:topsecret@db/app"},
		"is SQL Server":         {"postgres://app:topsecret@db/app", "sqlserver://sa:topsecret@db?database=x"},
		`transport "gochannel:`: {"gochannel:", "postgres://db/app"},
	} {
		err := connect.CheckExactlyOnce(urls[0], urls[1])
		require.ErrorIs(t, err, connect.ErrUnsupported, why)
		require.True(t, connect.Permanent(err))
		require.ErrorContains(t, err, why)
		require.ErrorContains(t, err, "one PostgreSQL database")
		require.NotContains(t, err.Error(), "topsecret")
	}
}

func TestOpenSQLTransportErrorsWithoutThePassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, u := range []string{
		"postgres://app:topsecret@127.0.0.1:1/x?connect_timeout=2",
		"mysql://app:topsecret@127.0.0.1:1/x?timeout=2s",
	} {
		_, err := connect.OpenTransport(ctx, u, watermill.NopLogger{})
		require.Error(t, err, u)
		require.False(t, connect.Permanent(err), "an unreachable server is worth retrying: %v", err)
		require.Contains(t, err.Error(), "127.0.0.1:1")
		require.NotContains(t, err.Error(), "topsecret")
	}
	_, err := connect.OpenTransport(ctx, "mysql://app:topsecret@127.0.0.1:1/", watermill.NopLogger{})
	require.True(t, connect.Permanent(err), "no database named")
	require.NotContains(t, err.Error(), "topsecret")
}

// TestSQLTransports opens both SQL transports from URLs as the command does, declares an
// endpoint and sends a message through.
func TestSQLTransports(t *testing.T) {
	t.Parallel()
	pgDSN, _ := testenv.PostgresSchema(t)
	myDSN, _ := testenv.MySQLDatabase(t)
	cfg, err := gomysql.ParseDSN(myDSN)
	require.NoError(t, err)
	myURL := (&url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + cfg.DBName}).String()
	for name, u := range map[string]string{"postgres": pgDSN, "mysql": myURL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tr, err := connect.OpenTransport(ctx, u, watermill.NopLogger{})
			require.NoError(t, err)
			defer tr.Close()
			require.IsType(t, &sqltransport.Publisher{}, tr.Publisher)
			require.NoError(t, tr.DeclareEndpoint(ctx, "orders", ""))
			require.NoError(t, tr.Publisher.Publish("orders.Timeouts", message.NewMessage("m-1", []byte("x"))))
			msgs, err := tr.Subscriber.Subscribe(t.Context(), "orders.Timeouts")
			require.NoError(t, err)
			select {
			case m := <-msgs:
				require.Equal(t, "m-1", m.UUID)
				m.Ack()
			case <-time.After(10 * time.Second):
				t.Fatal("no message")
			}
		})
	}
}

func TestExactlyOnceForwarder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, _ := testenv.PostgresSchema(t)
	require.NoError(t, connect.CheckExactlyOnce(dsn, dsn))
	tr, err := connect.OpenTransport(ctx, dsn, watermill.NopLogger{})
	require.NoError(t, err)
	defer tr.Close()
	store, err := connect.OpenStore(ctx, dsn, "orders")
	require.NoError(t, err)
	defer store.Close()
	f, err := connect.ExactlyOnceForwarder(ctx, tr, store, watermill.NopLogger{})
	require.NoError(t, err)
	require.NotNil(t, f)

	other, err := connect.OpenStore(ctx, "sqlite://"+filepath.Join(t.TempDir(), "t.db"), "orders")
	require.NoError(t, err)
	defer other.Close()
	_, err = connect.ExactlyOnceForwarder(ctx, tr, other, watermill.NopLogger{})
	require.ErrorIs(t, err, connect.ErrUnsupported)
	require.True(t, connect.Permanent(err))
	require.ErrorContains(t, err, "not the PostgreSQL store")
}
