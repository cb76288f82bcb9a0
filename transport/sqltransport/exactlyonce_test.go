package sqltransport

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// exactlyOnce is a PostgreSQL schema with a store and a transport on it, as the timeoutmill
// service opens them: each on a pool of its own.
type exactlyOnce struct {
	database
	store *postgres.Store
	pub   *Publisher
	sub   *Subscriber
}

func newExactlyOnce(t *testing.T) exactlyOnce {
	t.Helper()
	db := newDatabase(t, PostgreSQL)
	store, err := postgres.Open(context.Background(), postgres.Config{DSN: db.dsn, Endpoint: "orders"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	require.NoError(t, store.SetupInfrastructure(context.Background()))
	pub, sub := newPubSub(t, db.config())
	return exactlyOnce{database: db, store: store, pub: pub, sub: sub}
}

func (e exactlyOnce) forwarder(t *testing.T) *ExactlyOnceForwarder {
	t.Helper()
	f, err := NewExactlyOnceForwarder(context.Background(), e.pub, e.store, testLogger())
	require.NoError(t, err)
	return f
}

// timeout stores a due timeout and returns it with the message the dispatcher would forward.
func (e exactlyOnce) timeout(t *testing.T, id, destination string) (persistence.Timeout, *message.Message) {
	t.Helper()
	to := persistence.Timeout{ID: id, Destination: destination, Due: time.Now(), Payload: []byte("payload " + id),
		Metadata: map[string]string{"h": "ü"}}
	inserted, err := e.store.Store(context.Background(), to)
	require.NoError(t, err)
	require.True(t, inserted)
	msg := message.NewMessage(id, to.Payload)
	msg.Metadata.Set("h", "ü")
	return to, msg
}

func (e exactlyOnce) stored(t *testing.T, id string) bool {
	t.Helper()
	_, err := e.store.Peek(context.Background(), id)
	if errors.Is(err, persistence.ErrNotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

func TestForwardRemovesAndPublishesTogether(t *testing.T) {
	t.Parallel()
	e := newExactlyOnce(t)
	f := e.forwarder(t)
	ctx := context.Background()
	to, msg := e.timeout(t, "t-1", "payments")

	removed, err := f.Forward(ctx, to, msg)
	require.NoError(t, err)
	require.True(t, removed)
	require.False(t, e.stored(t, "t-1"), "removed from the store")
	require.Equal(t, 1, e.count(t, "payments"), "published to its destination")

	removed, err = f.Forward(ctx, to, msg)
	require.NoError(t, err)
	require.False(t, removed, "a timeout already gone")
	require.Equal(t, 1, e.count(t, "payments"), "is not published again")

	msgs, err := e.sub.Subscribe(t.Context(), "payments")
	require.NoError(t, err)
	got := next(t, msgs)
	require.Equal(t, "t-1", got.UUID)
	require.Equal(t, "payload t-1", string(got.Payload))
	require.Equal(t, message.Metadata{"h": "ü"}, got.Metadata)
	got.Ack()
}

// TestFailureBetweenForwardAndCommitPublishesNothing: whatever stops the transaction after the
// message was written (an error, or the connection dying as in a crash) takes the message back
// with it, and the timeout stays to be forwarded again: never delivered twice, never lost.
func TestFailureBetweenForwardAndCommitPublishesNothing(t *testing.T) {
	t.Parallel()
	e := newExactlyOnce(t)
	admin := e.open(t)
	for name, fail := range map[string]func(ctx context.Context, tx *sql.Tx) error{
		"error": func(context.Context, *sql.Tx) error { return errors.New("simulated failure after publish") },
		"connection killed": func(ctx context.Context, tx *sql.Tx) error {
			var pid int
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			_, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := e.forwarder(t)
			to, msg := e.timeout(t, "crash-"+name[:5], "crash-"+name[:5])
			var published int
			f.beforeCommit = func(ctx context.Context, tx *sql.Tx) error {
				// The message is in the destination table, seen from inside the transaction.
				require.NoError(t, tx.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s", e.pub.schema.quoted(to.Destination))).Scan(&published))
				return fail(ctx, tx)
			}
			removed, err := f.Forward(context.Background(), to, msg)
			require.Error(t, err)
			require.False(t, removed)
			require.Equal(t, 1, published, "published inside the transaction")
			require.Equal(t, 0, e.count(t, to.Destination), "and taken back with it")
			require.True(t, e.stored(t, to.ID), "the timeout is still there")
			t.Logf("%s after publish: %v; nothing published, timeout kept", name, err)

			f.beforeCommit = nil
			removed, err = f.Forward(context.Background(), to, msg)
			require.NoError(t, err)
			require.True(t, removed)
			require.Equal(t, 1, e.count(t, to.Destination), "forwarded once on the next attempt")
		})
	}
}

// TestRacingForwardersPublishEachOnce: two instances forwarding the same timeouts at once (a
// dispatcher message delivered twice, a lease that ran out) publish each exactly once.
func TestRacingForwardersPublishEachOnce(t *testing.T) {
	t.Parallel()
	const count = 200
	e := newExactlyOnce(t)
	other := e
	var err error
	other.store, err = postgres.Open(context.Background(), postgres.Config{DSN: e.dsn, Endpoint: "orders"})
	require.NoError(t, err)
	defer other.store.Close()
	other.pub, other.sub = newPubSub(t, e.config())
	forwarders := []*ExactlyOnceForwarder{e.forwarder(t), other.forwarder(t)}

	var (
		wg      sync.WaitGroup
		removed atomic.Int64
		failed  atomic.Value
	)
	for i := range count {
		to, msg := e.timeout(t, fmt.Sprintf("race-%03d", i), "raced")
		for _, f := range forwarders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := f.Forward(context.Background(), to, msg)
				if err != nil {
					failed.Store(err)
				}
				if ok {
					removed.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		require.NoError(t, err)
	}
	require.Equal(t, int64(count), removed.Load(), "each removed once")
	require.Equal(t, count, e.count(t, "raced"), "each published once")
	var distinct int
	require.NoError(t, e.open(t).QueryRowContext(context.Background(),
		`SELECT COUNT(DISTINCT uuid) FROM "watermill_raced"`).Scan(&distinct))
	require.Equal(t, count, distinct)
}

// TestExactlyOnceRefusesWhatCannotShareATransaction: each refusal says why, at start.
func TestExactlyOnceRefusesWhatCannotShareATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newExactlyOnce(t)

	refuse := func(t *testing.T, pub message.Publisher, store persistence.Store, why string) {
		t.Helper()
		_, err := NewExactlyOnceForwarder(ctx, pub, store, nil)
		require.ErrorIs(t, err, ErrExactlyOnceUnsupported)
		require.ErrorIs(t, err, persistence.ErrUnsupported)
		require.ErrorContains(t, err, why)
		t.Log(err)
	}

	t.Run("transport not SQL", func(t *testing.T) {
		channel := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		defer channel.Close()
		refuse(t, channel, e.store, "not a watermill-sql one")
	})
	t.Run("store in memory", func(t *testing.T) {
		refuse(t, e.pub, memory.New(), "not the PostgreSQL store")
	})
	t.Run("store SQLite", func(t *testing.T) {
		s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Endpoint: "orders"})
		require.NoError(t, err)
		defer s.Close()
		refuse(t, e.pub, s, "not the PostgreSQL store")
	})
	t.Run("transport and store on MariaDB", func(t *testing.T) {
		my := newDatabase(t, MySQL)
		pub, _ := newPubSub(t, my.config())
		s, err := mysql.Open(ctx, mysql.Config{DSN: my.dsn, Endpoint: "orders"})
		require.NoError(t, err)
		defer s.Close()
		refuse(t, pub, s, "the transport is on MariaDB/MySQL")
	})
	t.Run("another database on the same server", func(t *testing.T) {
		dsn := otherDatabase(t)
		pub, _ := newPubSub(t, Config{Dialect: PostgreSQL, DSN: dsn})
		refuse(t, pub, e.store, "different databases cannot share a transaction")
	})
	t.Run("the same database through another DSN", func(t *testing.T) {
		// Another schema on the search_path, a pool of its own: still one database.
		other := newDatabase(t, PostgreSQL)
		pub, _ := newPubSub(t, other.config())
		_, err := NewExactlyOnceForwarder(ctx, pub, e.store, nil)
		require.NoError(t, err)
	})
	t.Run("one pool for both", func(t *testing.T) {
		pool := e.open(t)
		store, err := postgres.New(pool, postgres.Config{Endpoint: "orders"})
		require.NoError(t, err)
		pub, _, err := New(ctx, Config{Dialect: PostgreSQL, DB: pool}, nil)
		require.NoError(t, err)
		defer pub.Close()
		_, err = NewExactlyOnceForwarder(ctx, pub, store, nil)
		require.NoError(t, err)
	})
}

// otherDatabase creates a database of the test's own beside the test database, dropped when the
// test ends, and returns a DSN for it.
func otherDatabase(t *testing.T) string {
	t.Helper()
	base := testenv.PostgresDSN(t)
	name := testenv.UniqueName(t, "tmdb")
	admin, err := sql.Open("pgx", base)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.ExecContext(context.Background(), "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		admin, err := sql.Open("pgx", base)
		require.NoError(t, err)
		defer admin.Close()
		_, err = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		require.NoError(t, err)
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}
