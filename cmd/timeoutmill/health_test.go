package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// probe GETs path on handler and returns the status and the JSON body.
func probe(t *testing.T, handler http.Handler, path string) (int, probeBody) {
	t.Helper()
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	var body probeBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec.Code, body
}

// TestProbesFollowTheStartAndTheManager: /healthz answers 200 throughout; /readyz 503 naming what
// the start waits for (the passwords of the store and the transport redacted), then the manager's
// reasons, 200 once it runs, and 503 "stopped" after the stop.
func TestProbesFollowTheStartAndTheManager(t *testing.T) {
	t.Parallel()
	p := newProbes("orders", "orders-0", "postgres://app:topsecret@db:5432/orders", "amqp://guest:brokersecret@mq:5672/")
	mux := http.NewServeMux()
	p.register(mux)

	code, body := probe(t, mux, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, probeBody{Status: "serving", Endpoint: "orders", Instance: "orders-0"}, body)

	p.waiting("store not open", errors.New(`cannot connect to postgres://app:topsecret@db:5432/orders: connection refused`))
	code, body = probe(t, mux, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready", body.Status)
	require.Len(t, body.NotReady, 1)
	require.True(t, strings.HasPrefix(body.NotReady[0], "store not open: cannot connect"), body.NotReady[0])
	require.NotContains(t, body.NotReady[0], "topsecret")
	p.waiting("transport not open", errors.New(`dial amqp://guest:brokersecret@mq:5672/: no such host`))
	_, body = probe(t, mux, "/readyz")
	require.NotContains(t, body.NotReady[0], "brokersecret")
	require.Contains(t, body.NotReady[0], "transport not open: dial amqp://guest:")

	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubSub.Close()
	store, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Endpoint: "orders"})
	require.NoError(t, err)
	defer store.Close()
	manager, err := timeouts.NewManager(timeouts.Config{Endpoint: "orders", Store: store, Publisher: pubSub, Subscriber: pubSub, Instance: "orders-0"}, nil)
	require.NoError(t, err)
	p.follow(manager)
	code, body = probe(t, mux, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, []string{"not added to a router", "store not set up"}, body.NotReady)

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	require.Eventually(t, func() bool { code, _ := probe(t, mux, "/readyz"); return code == http.StatusOK }, 30*time.Second, 10*time.Millisecond)
	code, body = probe(t, mux, "/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, probeBody{Status: "ready", Endpoint: "orders", Instance: "orders-0"}, body)

	require.NoError(t, router.Close())
	require.NoError(t, <-ran)
	<-manager.Done()
	code, body = probe(t, mux, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, []string{"stopped"}, body.NotReady)
	code, _ = probe(t, mux, "/healthz")
	require.Equal(t, http.StatusOK, code)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// get GETs url and returns the status and the JSON body; status 0 when nothing answers.
func get(t *testing.T, url string) (int, probeBody) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	res, err := client.Get(url)
	if err != nil {
		return 0, probeBody{}
	}
	defer res.Body.Close()
	var body probeBody
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	return res.StatusCode, body
}

// TestRunServesTheProbesWhileWaitingForTheStore: `timeoutmill run` answers /healthz and /readyz
// on --http and on --metrics-addr while it waits for a store that does not answer: live, not
// ready, saying why, without the password; the dashboard's pages answer 503 meanwhile.
func TestRunServesTheProbesWhileWaitingForTheStore(t *testing.T) {
	t.Parallel()
	httpAddr, metricsAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan string, 1)
	go func() {
		_, _, stderr := timeoutmill(ctx, "run", "--endpoint", "e", "--store", "postgres://app:topsecret@127.0.0.1:1/db",
			"--transport", "amqp://guest:guest@127.0.0.1:1/", "--outage-wait", "5m", "--http", httpAddr, "--metrics-addr", metricsAddr)
		done <- stderr
	}()
	for _, base := range []string{"http://" + httpAddr, "http://" + metricsAddr} {
		require.Eventually(t, func() bool { code, _ := get(t, base+"/healthz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
		require.Eventually(t, func() bool {
			_, body := get(t, base+"/readyz")
			return len(body.NotReady) == 1 && strings.HasPrefix(body.NotReady[0], "store not open: ")
		}, 30*time.Second, 20*time.Millisecond, "the failed attempt is named")
		code, body := get(t, base+"/readyz")
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "not ready", body.Status)
		require.Equal(t, "e", body.Endpoint)
		require.NotContains(t, body.NotReady[0], "topsecret")
	}
	res, err := http.Get("http://" + httpAddr + "/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "no dashboard before the manager")
	cancel()
	select {
	case stderr := <-done:
		require.NotContains(t, stderr, "topsecret")
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not stop while waiting for the store")
	}
}

// TestRunIsReadyOnBothListeners runs the service on RabbitMQ and SQLite: /readyz answers 200 on
// --http and --metrics-addr once it runs, and /metrics still serves.
func TestRunIsReadyOnBothListeners(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	httpAddr, metricsAddr := freeAddr(t), freeAddr(t)
	endpoint := "cmdready-" + watermill.NewShortUUID()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr string
	go func() {
		var code int
		code, _, stderr = timeoutmill(ctx, "run", "--endpoint", endpoint, "--store", "sqlite://"+filepath.Join(t.TempDir(), "t.db"),
			"--transport", amqpURL, "--close-timeout", "5s", "--instance", "node-0", "--http", httpAddr, "--metrics-addr", metricsAddr)
		done <- code
	}()
	for _, base := range []string{"http://" + httpAddr, "http://" + metricsAddr} {
		require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK }, 60*time.Second, 50*time.Millisecond,
			"ready on %s", base)
		_, body := get(t, base+"/readyz")
		require.Equal(t, probeBody{Status: "ready", Endpoint: endpoint, Instance: "node-0"}, body)
	}
	res, err := http.Get("http://" + metricsAddr + "/metrics")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, stderr)
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not stop")
	}
}
