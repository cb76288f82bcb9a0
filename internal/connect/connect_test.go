package connect_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://app:s3cret@db:5432/x":             "postgres://app:xxxxx@db:5432/x",
		"amqp://guest:guest@127.0.0.1:5672/":          "amqp://guest:xxxxx@127.0.0.1:5672/",
		"mysql://u:p%40ss@h/db":                       "mysql://u:xxxxx@h/db",
		"u:hunter2@tcp(127.0.0.1:3306)/db":            "u:xxxxx@tcp(127.0.0.1:3306)/db",
		"mysql://u:hunter2@tcp(127.0.0.1:3306)/db":    "mysql://u:xxxxx@tcp(127.0.0.1:3306)/db",
		"sqlite:///var/lib/t.db":                      "sqlite:///var/lib/t.db",
		"postgres://app@db/x":                         "postgres://app@db/x",
		"redis://:s3cret@cache:6379/0":                "redis://:xxxxx@cache:6379/0",
		"nats://app:s3cret@nats:4222":                 "nats://app:xxxxx@nats:4222",
		"error for postgres://a:b@h/x in the text":    "error for postgres://a:xxxxx@h/x in the text",
		"amqp://u:one@h1:5672/,amqp://u:two@h2:5673/": "amqp://u:xxxxx@h1:5672/,amqp://u:xxxxx@h2:5673/",
	} {
		require.Equal(t, want, connect.Redact(in), in)
	}
}

func TestMySQLDriverDSN(t *testing.T) {
	t.Parallel()
	got, err := connect.MySQLDriverDSN("mysql://app:pw@127.0.0.1:3316/timeoutmill?timeout=5s")
	require.NoError(t, err)
	require.Equal(t, "app:pw@tcp(127.0.0.1:3316)/timeoutmill?parseTime=true&timeout=5s", got)

	got, err = connect.MySQLDriverDSN("mysql://app:pw@db/x")
	require.NoError(t, err)
	require.Equal(t, "app:pw@tcp(db:3306)/x?parseTime=true", got)

	got, err = connect.MySQLDriverDSN("mysql://app:pw@tcp(db:3307)/x")
	require.NoError(t, err)
	require.Equal(t, "app:pw@tcp(db:3307)/x?parseTime=true", got)

	_, err = connect.MySQLDriverDSN("mysql://app:pw@db:3306/")
	require.ErrorIs(t, err, connect.ErrInvalid)
	require.True(t, connect.Permanent(err))
	require.NotContains(t, err.Error(), "pw@")
}

// TestOpenExistingStoreCreatesNothing: the store of a command that only looks is opened without
// creating the SQLite file or a table, and a missing one is an error that is not retried.
func TestOpenExistingStoreCreatesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "t.db")
	_, err := connect.OpenExistingStore(ctx, "sqlite://"+path, "orders")
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.True(t, connect.Permanent(err), "waiting does not make a table appear")
	require.ErrorContains(t, err, "store sqlite://"+path+": sqlite: database file "+path+" does not exist")
	require.NoFileExists(t, path)

	store, err := connect.OpenStore(ctx, "sqlite://"+path, "orders")
	require.NoError(t, err)
	require.NoError(t, store.Close())
	_, err = connect.OpenExistingStore(ctx, "sqlite://"+path, "order")
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.ErrorContains(t, err, `table "order.timeouts" does not exist`)
	store, err = connect.OpenExistingStore(ctx, "sqlite://"+path, "orders")
	require.NoError(t, err)
	require.NoError(t, store.Close())
}

func TestOpenStoreSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	store, err := connect.OpenStore(ctx, "sqlite://"+path, "orders")
	require.NoError(t, err)
	require.IsType(t, &sqlite.Store{}, store)
	require.NoError(t, store.Close())
}

func TestOpenStoreErrorsNameTheProblemWithoutThePassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := connect.OpenStore(ctx, "redis://u:topsecret@h/0", "orders")
	require.ErrorIs(t, err, connect.ErrUnsupported)
	require.ErrorContains(t, err, "expected one of")
	require.NotContains(t, err.Error(), "topsecret")

	// Nothing listens on port 1: the error says which server, not the password.
	_, err = connect.OpenStore(ctx, "postgres://app:topsecret@127.0.0.1:1/x?connect_timeout=2", "orders")
	require.Error(t, err)
	require.False(t, connect.Permanent(err), "an unreachable server is worth retrying")
	require.Contains(t, err.Error(), "127.0.0.1:1")
	require.NotContains(t, err.Error(), "topsecret")

	_, err = connect.OpenStore(ctx, "mysql://app:topsecret@127.0.0.1:1/x?timeout=2s", "orders")
	require.Error(t, err)
	require.Contains(t, err.Error(), "127.0.0.1:1")
	require.NotContains(t, err.Error(), "topsecret")
}

func TestOpenTransportRefusesGoChannelAndUnknownSchemes(t *testing.T) {
	t.Parallel()
	_, err := connect.OpenTransport(context.Background(), "gochannel:", watermill.NopLogger{})
	require.ErrorIs(t, err, connect.ErrUnsupported)
	require.ErrorContains(t, err, "lives inside one process")

	_, err = connect.OpenTransport(context.Background(), "kafka://u:topsecret@h", watermill.NopLogger{})
	require.ErrorIs(t, err, connect.ErrUnsupported)
	require.NotContains(t, err.Error(), "topsecret")

	_, err = connect.OpenTransport(context.Background(), "amqp://guest:topsecret@127.0.0.1:1/", watermill.NopLogger{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "topsecret")
}

func TestOpenStoreSQLServerUnreachableSaysWhichWithoutThePassword(t *testing.T) {
	t.Parallel()
	_, err := connect.OpenStore(context.Background(), "sqlserver://sa:topsecret@127.0.0.1:1?database=x&dial+timeout=2", "orders")
	require.Error(t, err)
	require.Contains(t, err.Error(), "127.0.0.1:1")
	require.NotContains(t, err.Error(), "topsecret")
	require.False(t, connect.Permanent(err))
}
