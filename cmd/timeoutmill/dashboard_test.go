package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

func TestDashboardBindsLoopbackUnlessTold(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{":8080": "127.0.0.1:8080", "127.0.0.1:9": "127.0.0.1:9", "0.0.0.0:80": "0.0.0.0:80", "[::1]:1": "[::1]:1"} {
		got, err := dashboardAddr(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := dashboardAddr("8080")
	require.Error(t, err)

	code, _, stderr := timeoutmill(context.Background(), "run", "--endpoint", "e", "--store", "postgres://app:topsecret@127.0.0.1:1/db",
		"--transport", "amqp://guest:guest@127.0.0.1:1/", "--outage-wait", "1m", "--http", "nohostport")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--http")
	require.NotContains(t, stderr, "topsecret")
}

// TestRunServesTheDashboard runs the service with --http and the token from the environment:
// the API finds a stored timeout, refuses a cancel without the token, cancels with it, and
// neither the pages, the API nor the log show the token or the broker's password.
func TestRunServesTheDashboard(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	const token = "cli-token-0123456789abcdef"
	t.Setenv("TIMEOUTMILL_HTTP_TOKEN", token)
	endpoint := "cmddash-" + watermill.NewShortUUID()
	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := listener.Addr().String()
	require.NoError(t, listener.Close())

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan int, 1)
	var stderr string
	go func() {
		var code int
		code, _, stderr = timeoutmill(ctx, "run", "--endpoint", endpoint, "--store", db, "--transport", amqpURL,
			"--close-timeout", "5s", "--http", addr)
		done <- code
	}()

	pub, err := amqptransport.NewPublisher(amqptransport.Config{URL: amqpURL}, watermill.NopLogger{})
	require.NoError(t, err)
	defer pub.Close()
	producer, err := timeouts.NewPublisher(pub, endpoint)
	require.NoError(t, err)
	msg := message.NewMessage(watermill.NewUUID(), []byte("cancel me"))
	timeouts.DeliverAfter(msg, time.Hour)
	require.NoError(t, producer.Publish(endpoint+".dest", msg))

	base := "http://" + addr
	call := func(method, path string, header map[string]string) (int, string) {
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, body := call(http.MethodGet, "/api/timeouts/"+msg.UUID, nil)
		if status == http.StatusOK {
			require.Contains(t, body, `"payload_text":"cancel me"`)
			break
		}
		select {
		case code := <-done:
			t.Fatalf("the service exited with %d: %s", code, stderr)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the timeout was not stored: %d %s", status, body)
		time.Sleep(100 * time.Millisecond)
	}
	status, body := call(http.MethodPost, "/api/timeouts/"+msg.UUID+"/cancel", nil)
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, body = call(http.MethodPost, "/api/timeouts/"+msg.UUID+"/cancel", map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, http.StatusOK, status, body)
	status, body = call(http.MethodGet, "/api/timeouts/"+msg.UUID, nil)
	require.Equal(t, http.StatusNotFound, status, body)

	password := regexp.MustCompile(`://[^:]*:([^@]*)@`).FindStringSubmatch(amqpURL)
	for _, path := range []string{"/", "/api/stats", "/timeouts/" + msg.UUID, "/static/app.js"} {
		_, body := call(http.MethodGet, path, nil)
		require.NotContains(t, body, token, path)
		require.NotContains(t, body, amqpURL, path)
		if len(password) == 2 && len(password[1]) > 3 {
			require.NotContains(t, body, ":"+password[1]+"@", path)
		}
	}
	stop()
	select {
	case code := <-done:
		require.Equal(t, 0, code, stderr)
	case <-time.After(20 * time.Second):
		t.Fatal("the service did not stop")
	}
	require.Contains(t, stderr, "Serving the dashboard")
	require.Contains(t, stderr, "actions=enabled")
	require.NotContains(t, stderr, token)
	require.False(t, strings.Contains(stderr, amqpURL), "the log redacts the broker URL")
}
