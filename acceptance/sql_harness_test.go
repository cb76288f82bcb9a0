package acceptance

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

// This file is the harness of the scenarios on the SQL transport (sql_*_test.go): the transport
// and the store on one database of the test's own, as `timeoutmill run --transport postgres://...
// --store postgres://...` runs them, each instance with pools of its own.

// sqlBackend is a SQL transport with the store on the same database.
type sqlBackend struct {
	name    string
	dialect sqltransport.Dialect
	// exactlyOnce runs the dispatch satellite with sqltransport's ExactlyOnceForwarder.
	exactlyOnce bool
}

// sqlBackends are the SQL setups every SQL scenario runs on. Exactly once applies to PostgreSQL
// only.
func sqlBackends() []sqlBackend {
	return []sqlBackend{
		{name: "postgres", dialect: sqltransport.PostgreSQL},
		{name: "postgres-exactly-once", dialect: sqltransport.PostgreSQL, exactlyOnce: true},
		{name: "mariadb", dialect: sqltransport.MySQL},
	}
}

// forEachSQLBackend runs scenario on each SQL backend, in parallel.
func forEachSQLBackend(t *testing.T, scenario func(t *testing.T, e *sqlEnv)) {
	t.Helper()
	for _, b := range sqlBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			scenario(t, newSQLEnv(t, b, b.name))
		})
	}
}

// sqlEnv is one test's endpoint on a database of its own (a schema on PostgreSQL, a database on
// MariaDB), dropped when the test ends.
type sqlEnv struct {
	sqlBackend
	dsn        string // the driver's DSN of the database
	schema     string // on PostgreSQL, the test's schema, which the DSN's search_path names
	endpoint   string
	errorQueue string
	db         *sql.DB // to look behind the transport, and to play a producer that writes SQL
	// tune, when set, adjusts the transport's configuration of every node and receiver.
	tune func(*sqltransport.Config)
}

func newSQLEnv(t *testing.T, b sqlBackend, tag string) *sqlEnv {
	t.Helper()
	e := &sqlEnv{sqlBackend: b, endpoint: "acc-sql-" + tag + "-" + randomHex(t, 4)}
	e.errorQueue = e.endpoint + ".error"
	driver := "pgx"
	if b.dialect == sqltransport.MySQL {
		e.dsn, _ = testenv.MySQLDatabase(t)
		driver = "mysql"
	} else {
		e.dsn, e.schema = testenv.PostgresSchema(t)
	}
	db, err := sql.Open(driver, e.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	e.db = db
	return e
}

// config is the transport's configuration: the package's defaults, unless tune changes them.
func (e *sqlEnv) config() sqltransport.Config {
	c := sqltransport.Config{Dialect: e.dialect, DSN: e.dsn}
	if e.tune != nil {
		e.tune(&c)
	}
	return c
}

// store opens a store for the endpoint on the test's database, as another process would, and
// creates its table.
func (e *sqlEnv) store(t *testing.T) persistence.Store {
	t.Helper()
	var (
		s   persistence.Store
		err error
	)
	if e.dialect == sqltransport.MySQL {
		s, err = mysql.Open(context.Background(), mysql.Config{DSN: e.dsn, Endpoint: e.endpoint})
	} else {
		s, err = postgres.Open(context.Background(), postgres.Config{DSN: e.dsn, Schema: e.schema, Endpoint: e.endpoint})
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.(persistence.Installer).SetupInfrastructure(context.Background()))
	return s
}

// table is topic's table as SQL names it.
func (e *sqlEnv) table(t *testing.T, topic string) string {
	t.Helper()
	pub, err := sqltransport.NewPublisher(context.Background(), e.config(), nil)
	require.NoError(t, err)
	defer pub.Close()
	require.NoError(t, pub.DeclareQueues(context.Background(), topic))
	name, err := pub.Table(topic)
	require.NoError(t, err)
	return name
}

// rows counts topic's messages that wait, not yet acked.
func (e *sqlEnv) rows(t *testing.T, topic string) int {
	t.Helper()
	return e.waiting(t, e.table(t, topic))
}

// waiting counts the messages that wait in a queue table (see table), not yet acked.
func (e *sqlEnv) waiting(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+table+" WHERE acked = FALSE").Scan(&n))
	return n
}

// sqlNode is one running instance of the endpoint's timeout manager, as a `timeoutmill run`
// process would be: its own pools, its own router, its own store handle.
type sqlNode struct {
	manager *timeouts.Manager
	pub     *sqltransport.Publisher
}

// startSQLNode runs a timeout manager for e's endpoint on store; mutate adjusts its config.
func startSQLNode(t *testing.T, e *sqlEnv, store persistence.Store, mutate func(*timeouts.Config)) *sqlNode {
	t.Helper()
	return startSQLNodeLogged(t, e, store, testLogger(), mutate)
}

// startSQLNodeLogged is startSQLNode with the node's logger.
func startSQLNodeLogged(t *testing.T, e *sqlEnv, store persistence.Store, logger watermill.LoggerAdapter, mutate func(*timeouts.Config)) *sqlNode {
	t.Helper()
	ctx := context.Background()
	pub, sub, err := sqltransport.New(ctx, e.config(), logger)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	require.NoError(t, pub.DeclareEndpoint(ctx, e.endpoint, e.errorQueue))

	cfg := timeouts.Config{
		Endpoint:   e.endpoint,
		Store:      store,
		Publisher:  pub,
		Subscriber: sub,
		ErrorQueue: e.errorQueue,
	}
	if e.exactlyOnce {
		cfg.Forwarder, err = sqltransport.NewExactlyOnceForwarder(ctx, pub, store, logger)
		require.NoError(t, err)
	}
	if mutate != nil {
		mutate(&cfg)
	}
	manager, err := timeouts.NewManager(cfg, logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 15 * time.Second}, logger)
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))

	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	var runErr error
	go func() {
		defer close(stopped)
		runErr = router.Run(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		_ = router.Close() // closes the subscriber too
		<-stopped
		<-manager.Done()
		require.NoError(t, manager.Err(), "no critical error")
	})
	select {
	case <-router.Running():
	case <-stopped:
		t.Fatalf("router stopped at start: %v", runErr)
	}
	return &sqlNode{manager: manager, pub: pub}
}

// sqlReceive consumes topic with a subscriber of its own and returns arrivals as they come.
func sqlReceive(t *testing.T, e *sqlEnv, topic string) <-chan arrival {
	t.Helper()
	sub, err := sqltransport.NewSubscriber(context.Background(), e.config(), testLogger())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	out := make(chan arrival, 8192)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range msgs {
			out <- arrival{msg: m, at: time.Now()}
			m.Ack()
		}
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sub.Close())
		wg.Wait()
	})
	return out
}
