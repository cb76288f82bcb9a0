package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"
)

// TestTracesExportedWithOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT set, the service's spans are
// posted to that endpoint's /v1/traces in OTLP's protobuf.
func TestTracesExportedWithOTLP(t *testing.T) {
	var posts atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SERVICE_NAME": "timeoutmill-test"}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // the exporter reads its own settings
	tp, shutdown, err := tracerProvider(t.Context(), func(k string) string { return env[k] }, watermill.NopLogger{})
	require.NoError(t, err)
	require.NotNil(t, tp)
	_, span := tp.Tracer("test").Start(context.Background(), "a span")
	span.End()
	require.NoError(t, shutdown(t.Context()))
	require.Positive(t, posts.Load(), "spans posted to the collector")
}

func TestTracesOffByDefault(t *testing.T) {
	tp, shutdown, err := tracerProvider(t.Context(), func(string) string { return "" }, watermill.NopLogger{})
	require.NoError(t, err)
	require.Nil(t, tp, "no exporter without OTEL_EXPORTER_OTLP_ENDPOINT")
	require.NoError(t, shutdown(t.Context()))

	_, _, err = tracerProvider(t.Context(), func(k string) string {
		return map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}[k]
	}, watermill.NopLogger{})
	require.ErrorContains(t, err, "zipkin")
}
