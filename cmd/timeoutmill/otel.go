package main

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerProvider returns the provider of the service's spans: an OTLP/HTTP exporter when the
// standard OpenTelemetry environment asks for one (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, OTEL_TRACES_EXPORTER unset or "otlp"), which reads the
// rest of its settings (headers, timeout, protocol details) from OTEL_* itself; otherwise none.
// shutdown flushes the spans not yet exported.
func tracerProvider(ctx context.Context, getenv func(string) string, logger watermill.LoggerAdapter) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	switch exporter := getenv("OTEL_TRACES_EXPORTER"); exporter {
	case "none":
		return nil, none, nil
	case "", "otlp":
	default:
		return nil, none, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: timeoutmill exports traces with otlp (over HTTP) or none", exporter)
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, none, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, none, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}
	// resource.Default reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the service name
	// defaults to timeoutmill rather than the SDK's unknown_service.
	res := resource.Default()
	if getenv("OTEL_SERVICE_NAME") == "" {
		if merged, err := resource.Merge(res, resource.NewSchemaless(semconv.ServiceName("timeoutmill"))); err == nil {
			res = merged
		}
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	logger.Info("Exporting traces with OTLP over HTTP", nil)
	return provider, func(ctx context.Context) error {
		return provider.Shutdown(ctx)
	}, nil
}
