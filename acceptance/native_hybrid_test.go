package acceptance

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// nativeManager runs the timeout manager of endpoint (emulated delays, stored in store) as the
// timeoutmill service does, until stop is called or the test ends. It returns the manager's
// publisher, which delays through the endpoint's Timeouts queue.
func (e *nativeEnv) manager(t *testing.T, endpoint string, store persistence.Store) (pub *timeouts.Publisher, stop func()) {
	t.Helper()
	logger := testLogger()
	tpub, tsub, err := amqptransport.New(amqptransport.Config{URL: e.url, ConnectionName: endpoint, Consumers: 4}, logger)
	require.NoError(t, err)
	require.NoError(t, tpub.DeclareEndpoint(context.Background(), endpoint, endpoint+".error"))
	t.Cleanup(func() {
		if ch, err := e.conn.Channel(); err == nil {
			for _, q := range []string{endpoint + ".Timeouts", endpoint + ".TimeoutsDispatcher", endpoint + ".error"} {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			_ = ch.Close()
		}
	})
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint: endpoint, Store: store, Publisher: tpub, Subscriber: tsub, ErrorQueue: endpoint + ".error",
	}, logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 15 * time.Second}, logger)
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = router.Run(ctx)
	}()
	<-router.Running()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		_ = router.Close()
		<-stopped
		<-manager.Done()
		require.NoError(t, manager.Err())
		require.NoError(t, tpub.Close())
	}
	t.Cleanup(stop)
	return manager.Publisher(), stop
}

// postgresStore opens a store for endpoint in a schema of the test's own.
func (e *nativeEnv) postgresStore(t *testing.T, endpoint string) persistence.Store {
	t.Helper()
	dsn, schema := testenv.PostgresSchema(t)
	store, err := postgres.Open(context.Background(), postgres.Config{DSN: dsn, Endpoint: endpoint, Schema: schema})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(context.Background()))
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// commandStore opens a store for endpoint where the timeoutmill command finds it (the public
// schema of the test database), and returns the DSN to give the command; the table is dropped
// when the test ends.
func (e *nativeEnv) commandStore(t *testing.T, endpoint string) (string, *postgres.Store) {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	store, err := postgres.Open(context.Background(), postgres.Config{DSN: dsn, Endpoint: endpoint})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(context.Background()))
	t.Cleanup(func() {
		_ = store.Close()
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS public.%q`, endpoint+".timeouts")); err != nil {
			t.Logf("dropping the table of %s: %v", endpoint, err)
		}
	})
	return dsn, store
}

// A native sender delays messages for an endpoint that knows nothing of native delays and only
// runs the timeout manager, while that endpoint's own emulated delays keep working.
func TestNativeSenderToAnEndpointThatOnlyRunsTheTimeoutManager(t *testing.T) {
	t.Parallel()
	e := newNativeEnv(t)
	legacy := e.prefix + ".legacy"
	emulated, _ := e.manager(t, legacy, e.postgresStore(t, legacy))
	input := e.queue(t, "legacy-input")
	arrivals := e.receive(t, input)

	due := map[string]time.Time{}
	for i, pub := range []message.Publisher{e.pub, emulated, e.pub, emulated} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("message %d", i)))
		d := time.Duration(2+i%2) * time.Second
		timeouts.DeliverAfter(msg, d)
		due[msg.UUID] = time.Now().Add(d)
		require.NoError(t, pub.Publish(input, msg))
	}
	arrivals.wait(t, len(due), 3*time.Second+nativeManagerLateBound)
	for id, at := range due {
		got, msg, _ := arrivals.first(id)
		require.False(t, got.Before(at), "%s early", msg.Payload)
		t.Logf("%s: %s after due", msg.Payload, got.Sub(at).Round(time.Millisecond))
	}
	time.Sleep(500 * time.Millisecond)
	require.Empty(t, arrivals.duplicates())
}

// An endpoint switched to native delays keeps draining the timeouts it stored before; once the
// store is empty its timeout manager can be turned off, and native delays go on without it.
func TestNativeEndpointSwitchedToNativeDrainsItsStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newNativeEnv(t)
	endpoint := e.prefix + ".orders"
	store := e.postgresStore(t, endpoint)
	emulated, stopManager := e.manager(t, endpoint, store)
	dest := e.queue(t, "shipping")
	arrivals := e.receive(t, dest)

	// Before the switch: delays stored by the timeout manager.
	var ids []string
	for i := range 20 {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("stored %d", i)))
		timeouts.DeliverAfter(msg, 3*time.Second+time.Duration(i)*100*time.Millisecond)
		require.NoError(t, emulated.Publish(dest, msg))
		ids = append(ids, msg.UUID)
	}
	require.Eventually(t, func() bool {
		st, err := store.(persistence.Inspector).Stats(ctx, time.Now())
		return err == nil && st.Pending == 20
	}, nativeManagerLateBound, 20*time.Millisecond, "the stored timeouts are in the store")

	// After the switch: new delays go native, with the manager still running.
	for i := range 20 {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("native %d", i)))
		timeouts.DeliverAfter(msg, time.Duration(1+i%3)*time.Second)
		require.NoError(t, e.pub.Publish(dest, msg))
		ids = append(ids, msg.UUID)
	}
	arrivals.wait(t, 40, 5*time.Second+nativeManagerLateBound)
	require.Eventually(t, func() bool {
		st, err := store.(persistence.Inspector).Stats(ctx, time.Now())
		return err == nil && st.Pending == 0
	}, nativeManagerLateBound, 50*time.Millisecond, "the store drains")
	for _, id := range ids {
		_, _, ok := arrivals.first(id)
		require.True(t, ok, id)
	}

	// Empty store: the timeout manager is turned off; native delays need nothing else.
	stopManager()
	msg := message.NewMessage(watermill.NewUUID(), []byte("after the manager"))
	timeouts.DeliverAfter(msg, time.Second)
	require.NoError(t, e.pub.Publish(dest, msg))
	arrivals.wait(t, 41, time.Second+nativeLateBound)
	require.Empty(t, arrivals.duplicates())
}
