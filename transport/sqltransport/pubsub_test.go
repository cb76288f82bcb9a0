package sqltransport

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/wire"
)

// database is a fresh database (a schema on PostgreSQL, a database on MariaDB) for one test.
type database struct {
	dialect Dialect
	dsn     string
}

func (d database) config() Config {
	return Config{Dialect: d.dialect, DSN: d.dsn, PollInterval: 20 * time.Millisecond}
}

// open is a pool on the test's database, for looking behind the transport.
func (d database) open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open(Config{Dialect: d.dialect}.driverName(), d.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// count is how many messages wait in topic's table, not acked.
func (d database) count(t testing.TB, topic string) int {
	t.Helper()
	return d.countWhere(t, topic, "WHERE acked = FALSE")
}

// rows is how many rows topic's table holds, acked or not.
func (d database) rows(t testing.TB, topic string) int {
	t.Helper()
	return d.countWhere(t, topic, "")
}

func (d database) countWhere(t testing.TB, topic, where string) int {
	t.Helper()
	var n int
	q := fmt.Sprintf("SELECT COUNT(*) FROM %s %s", names{dialect: d.dialect, prefix: defaultTablePrefix}.quoted(topic), where)
	require.NoError(t, d.open(t).QueryRowContext(context.Background(), q).Scan(&n))
	return n
}

func newDatabase(t testing.TB, d Dialect) database {
	t.Helper()
	if d == MySQL {
		dsn, _ := testenv.MySQLDatabase(t)
		return database{dialect: MySQL, dsn: dsn}
	}
	dsn, _ := testenv.PostgresSchema(t)
	return database{dialect: PostgreSQL, dsn: dsn}
}

// forEachDialect runs test on PostgreSQL and on MariaDB, in parallel.
func forEachDialect(t *testing.T, test func(t *testing.T, db database)) {
	t.Helper()
	for _, d := range []Dialect{PostgreSQL, MySQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			test(t, newDatabase(t, d))
		})
	}
}

func newPubSub(t testing.TB, config Config) (*Publisher, *Subscriber) {
	t.Helper()
	pub, sub, err := New(context.Background(), config, testLogger())
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, sub.Close())
		require.NoError(t, pub.Close())
	})
	return pub, sub
}

func testLogger() watermill.LoggerAdapter { return watermill.NopLogger{} }

// next receives a message within a generous bound.
func next(t testing.TB, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		require.True(t, ok, "channel closed")
		return m
	case <-time.After(15 * time.Second):
		t.Fatal("no message within 15 s")
		return nil
	}
}

func nothing(t testing.TB, ch <-chan *message.Message, during time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %s", m.UUID)
	case <-time.After(during):
	}
}

func TestRoundTripKeepsBytesHeadersAndOrder(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		pub, sub := newPubSub(t, db.config())
		body := make([]byte, 1<<20)
		_, err := rand.Read(body)
		require.NoError(t, err)
		body[0], body[len(body)-1] = 0, 0xff
		headers := message.Metadata{"ключ": "значение ✓ 🚀", "empty": "", "quotes": `"'\`}

		var sent []*message.Message
		for i := range 5 {
			m := message.NewMessage(watermill.NewUUID(), append([]byte{byte(i)}, body...))
			for k, v := range headers {
				m.Metadata.Set(k, v)
			}
			sent = append(sent, m)
		}
		require.NoError(t, pub.Publish("bytes", sent[:2]...))
		require.NoError(t, pub.Publish("bytes", sent[2:]...))

		msgs, err := sub.Subscribe(t.Context(), "bytes")
		require.NoError(t, err)
		for _, want := range sent {
			got := next(t, msgs)
			require.Equal(t, want.UUID, got.UUID, "in publishing order")
			require.True(t, bytes.Equal(want.Payload, got.Payload), "payload byte for byte")
			require.Equal(t, headers, got.Metadata)
			got.Ack()
		}
		require.Eventually(t, func() bool { return db.rows(t, "bytes") == 0 }, 10*time.Second, 20*time.Millisecond,
			"acked rows are deleted (on MySQL by the purge, within a second or two)")
	})
}

// TestCompetingSubscribersShareAQueue plays two processes, each with three consumers on one
// topic: every message reaches exactly one of the six.
func TestCompetingSubscribersShareAQueue(t *testing.T) {
	t.Parallel()
	const count = 600
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.Consumers = 3
		pub, subA := newPubSub(t, config)
		_, subB := newPubSub(t, config)
		var batch []*message.Message
		for i := range count {
			batch = append(batch, message.NewMessage(fmt.Sprintf("m-%04d", i), nil))
			if len(batch) == 50 {
				require.NoError(t, pub.Publish("work", batch...))
				batch = nil
			}
		}

		var (
			mu   sync.Mutex
			seen = map[string]string{}
			dups []string
			wg   sync.WaitGroup
		)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		for name, sub := range map[string]*Subscriber{"a": subA, "b": subB} {
			msgs, err := sub.Subscribe(ctx, "work")
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range msgs {
					mu.Lock()
					if _, dup := seen[m.UUID]; dup {
						dups = append(dups, m.UUID)
					}
					seen[m.UUID] = name
					mu.Unlock()
					time.Sleep(time.Millisecond) // a handler's work, so that both get a share
					m.Ack()
				}
			}()
		}
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == count
		}, 60*time.Second, 20*time.Millisecond)
		require.Eventually(t, func() bool { return db.count(t, "work") == 0 }, 10*time.Second, 20*time.Millisecond)
		cancel()
		wg.Wait()
		require.Empty(t, dups, "no message reached two consumers")
		shares := map[string]int{}
		for _, name := range seen {
			shares[name]++
		}
		t.Logf("%s: %d messages shared %v", db.dialect, count, shares)
		require.Positive(t, shares["a"])
		require.Positive(t, shares["b"])
	})
}

func TestNackedMessageIsHandedOutAgain(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.ResendInterval = 10 * time.Millisecond
		pub, sub := newPubSub(t, config)
		require.NoError(t, pub.Publish("retry", message.NewMessage("a", []byte("x")), message.NewMessage("b", []byte("y"))))
		msgs, err := sub.Subscribe(t.Context(), "retry")
		require.NoError(t, err)
		first := next(t, msgs)
		require.Equal(t, "a", first.UUID)
		first.Nack()
		again := next(t, msgs)
		require.Equal(t, "a", again.UUID, "the nacked message first, again")
		again.Ack()
		b := next(t, msgs)
		require.Equal(t, "b", b.UUID)
		b.Ack()
	})
}

// TestStoppingInTheMiddleOfABatchLosesNothing: a consumer closed while it holds a batch deletes
// the messages acked so far and leaves the others for the next consumer. (watermill-sql's own
// PostgreSQLQueueOffsetsAdapter deletes the whole batch then.)
func TestStoppingInTheMiddleOfABatchLosesNothing(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.BatchSize = 10
		pub, err := NewPublisher(context.Background(), config, nil)
		require.NoError(t, err)
		defer pub.Close()
		var sent []*message.Message
		for i := range 10 {
			sent = append(sent, message.NewMessage(fmt.Sprintf("m-%d", i), nil))
		}
		require.NoError(t, pub.Publish("half", sent...))

		sub, err := NewSubscriber(context.Background(), config, nil)
		require.NoError(t, err)
		msgs, err := sub.Subscribe(context.Background(), "half")
		require.NoError(t, err)
		for i := range 3 {
			m := next(t, msgs)
			require.Equal(t, fmt.Sprintf("m-%d", i), m.UUID)
			m.Ack()
		}
		require.Equal(t, "m-3", next(t, msgs).UUID) // handed out, never acked
		require.NoError(t, sub.Close())
		require.Equal(t, 7, db.count(t, "half"), "the three acked are deleted, the rest kept")

		sub2, err := NewSubscriber(context.Background(), config, nil)
		require.NoError(t, err)
		defer sub2.Close()
		msgs, err = sub2.Subscribe(t.Context(), "half")
		require.NoError(t, err)
		for i := 3; i < 10; i++ {
			m := next(t, msgs)
			require.Equal(t, fmt.Sprintf("m-%d", i), m.UUID)
			m.Ack()
		}
		nothing(t, msgs, 200*time.Millisecond)
	})
}

// TestRowsWrittenByOtherProgramsNeverBlockTheQueue: rows a producer wrote with plain SQL, with
// header values that are not strings or metadata that is not JSON at all.
func TestRowsWrittenByOtherProgramsNeverBlockTheQueue(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		pub, sub := newPubSub(t, db.config())
		require.NoError(t, pub.DeclareQueues(t.Context(), "foreign"))
		table, err := pub.Table("foreign")
		require.NoError(t, err)
		conn := db.open(t)
		// The same SQL on both: MariaDB checks its JSON columns, so metadata that is not JSON cannot
		// be written there, but JSON that is not an object can.
		insert := fmt.Sprintf("INSERT INTO %s (uuid, payload, metadata) VALUES ", table) +
			`('n', 'one', '{"retries": 2, "ok": true, "name": "ü"}'), ('bad', 'two', '[1, 2]'), ('null', NULL, NULL)`
		_, err = conn.ExecContext(t.Context(), insert)
		require.NoError(t, err)

		msgs, err := sub.Subscribe(t.Context(), "foreign")
		require.NoError(t, err)
		m := next(t, msgs)
		require.Equal(t, message.Metadata{"retries": "2", "ok": "true", "name": "ü"}, m.Metadata)
		require.Equal(t, "one", string(m.Payload))
		m.Ack()
		m = next(t, msgs)
		require.Equal(t, "bad", m.UUID)
		require.Contains(t, m.Metadata.Get(InvalidMetadataHeader), "not a JSON object")
		m.Ack()
		m = next(t, msgs)
		require.Equal(t, "null", m.UUID)
		require.Empty(t, m.Payload)
		require.Empty(t, m.Metadata)
		m.Ack()
	})
}

func TestSchemaInitialization(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.SkipSchemaInitialization = true
		pub, sub := newPubSub(t, config)
		err := pub.Publish("missing", message.NewMessage("a", nil))
		require.Error(t, err, "no table, no publish: nothing goes into the void")

		require.NoError(t, pub.DeclareEndpoint(t.Context(), "orders", ""))
		for _, topic := range []string{wire.TimeoutsQueue("orders"), wire.DispatcherQueue("orders"), wire.DefaultErrorQueue} {
			require.Equal(t, 0, db.count(t, topic), topic)
		}
		require.NoError(t, pub.DeclareEndpoint(t.Context(), "orders", "errors"), "idempotent")
		require.ErrorContains(t, pub.DeclareEndpoint(t.Context(), "or ders", ""), "whitespace")
		require.ErrorIs(t, pub.DeclareEndpoint(t.Context(), "orders/eu", ""), ErrInvalidTopic)
		require.NoError(t, sub.SubscribeInitialize("later"))
		require.Equal(t, 0, db.count(t, "later"))

		// Many publishers creating one table at once (instances starting together) all succeed.
		config.SkipSchemaInitialization = false
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := NewPublisher(context.Background(), config, nil)
				if err != nil {
					errs <- err
					return
				}
				defer p.Close()
				errs <- p.Publish("raced", message.NewMessage(fmt.Sprint(i), nil))
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 8, db.count(t, "raced"))
	})
}

// TestLongTopicsGetTablesOfTheirOwn: topics longer than a table name may be share a prefix, not
// a table.
func TestLongTopicsGetTablesOfTheirOwn(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		pub, sub := newPubSub(t, db.config())
		endpoint := strings.Repeat("e", 70)
		a, b := wire.TimeoutsQueue(endpoint), wire.DispatcherQueue(endpoint)
		require.NoError(t, pub.Publish(a, message.NewMessage("to-a", nil)))
		require.NoError(t, pub.Publish(b, message.NewMessage("to-b", nil)))
		for topic, want := range map[string]string{a: "to-a", b: "to-b"} {
			msgs, err := sub.Subscribe(t.Context(), topic)
			require.NoError(t, err)
			m := next(t, msgs)
			require.Equal(t, want, m.UUID)
			m.Ack()
		}
	})
}

func TestPublishAfterCloseAndInvalidTopics(t *testing.T) {
	t.Parallel()
	db := newDatabase(t, PostgreSQL)
	pub, sub := newPubSub(t, db.config())
	require.ErrorIs(t, pub.Publish("a b", message.NewMessage("x", nil)), ErrInvalidTopic)
	_, err := sub.Subscribe(t.Context(), `x"; DROP TABLE y; --`)
	require.ErrorIs(t, err, ErrInvalidTopic)
	require.NoError(t, pub.Close())
	require.NoError(t, pub.Close(), "twice")
	require.ErrorIs(t, pub.Publish("a", message.NewMessage("x", nil)), ErrClosed)
	require.NoError(t, sub.Close())
	_, err = sub.Subscribe(t.Context(), "a")
	require.ErrorIs(t, err, ErrClosed)
}

// TestPublishersPoolIsOpenedWhole: NewPublisher starts MaxOpenConns connections, so that the
// first burst of messages finds them rather than waiting while the server starts each one.
func TestPublishersPoolIsOpenedWhole(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, db database) {
		config := db.config()
		config.MaxOpenConns = 3
		pub, _ := newPubSub(t, config)
		stats := pub.db.Stats()
		require.Equal(t, 3, stats.OpenConnections, "every connection the pool may keep is open")
		require.Equal(t, 3, stats.Idle, "and idle, for the first publishes")
	})
}

// TestCallersDBStaysOpen: with Config.DB, the caller's pool is used and left open.
func TestCallersDBStaysOpen(t *testing.T) {
	t.Parallel()
	db := newDatabase(t, PostgreSQL)
	pool := db.open(t)
	pub, sub, err := New(t.Context(), Config{Dialect: PostgreSQL, DB: pool, PollInterval: 20 * time.Millisecond}, nil)
	require.NoError(t, err)
	require.NoError(t, pub.Publish("own", message.NewMessage("a", nil)))
	msgs, err := sub.Subscribe(t.Context(), "own")
	require.NoError(t, err)
	next(t, msgs).Ack()
	require.NoError(t, sub.Close())
	require.NoError(t, pub.Close())
	require.NoError(t, pool.PingContext(t.Context()))
}

// TestConsumersOutliveLostConnections: when the database drops every connection (a restart, a
// failover), consumers and publishers carry on with new ones and nothing is lost.
func TestConsumersOutliveLostConnections(t *testing.T) {
	t.Parallel()
	db := newDatabase(t, PostgreSQL)
	app := testenv.UniqueName(t, "app")
	config := db.config()
	config.RetryInterval = 50 * time.Millisecond
	config.DSN += "&application_name=" + app
	pub, sub := newPubSub(t, config)
	msgs, err := sub.Subscribe(t.Context(), "survive")
	require.NoError(t, err)
	require.NoError(t, pub.Publish("survive", message.NewMessage("before", nil)))
	next(t, msgs).Ack()

	var killed int
	require.NoError(t, db.open(t).QueryRowContext(t.Context(),
		`SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed))
	require.Positive(t, killed)
	t.Logf("terminated %d connections", killed)

	require.Eventually(t, func() bool {
		return pub.Publish("survive", message.NewMessage("after", nil)) == nil
	}, 10*time.Second, 50*time.Millisecond, "publishing works again")
	m := next(t, msgs)
	require.Equal(t, "after", m.UUID)
	m.Ack()
}

// TestCreatingTablesWhoseSequencesShareANameAtOnce: PostgreSQL names each table's offset
// sequence from a cut of the table's name, so long topics that differ only at the end make
// sequences of one name; creating their tables at once must not collide.
func TestCreatingTablesWhoseSequencesShareANameAtOnce(t *testing.T) {
	t.Parallel()
	db := newDatabase(t, PostgreSQL)
	base := "topic-" + strings.Repeat("x", 45) + "-"
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pub, err := NewPublisher(context.Background(), db.config(), nil)
			if err != nil {
				errs <- err
				return
			}
			defer pub.Close()
			errs <- pub.Publish(fmt.Sprint(base, i), message.NewMessage("m", nil))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
