package timeouts

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// tracerName names the instrumentation scope of the manager's spans.
const tracerName = "github.com/timeoutmill/timeoutmill/timeouts"

// traceContext carries a message's trace in its headers as W3C Trace Context (traceparent,
// tracestate). The headers travel through the Timeouts queue, the store and the delivery
// unchanged. So a consumer's span continues the producer's trace.
var traceContext = propagation.TraceContext{}

// injectTrace writes the trace of ctx into md, unless md carries one already or ctx has none.
func injectTrace(ctx context.Context, md map[string]string) {
	if _, ok := md["traceparent"]; ok {
		return
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	traceContext.Inject(ctx, propagation.MapCarrier(md))
}

// tracing makes the manager's spans. There is one for each timeout stored (Schedule, or a
// message handled on the Timeouts queue) and one for each timeout delivered. Each is linked to
// the trace of the message that scheduled it.
type tracing struct {
	tracer  trace.Tracer
	enabled bool
}

func newTracing(tp trace.TracerProvider) tracing {
	if tp == nil {
		return tracing{tracer: noop.NewTracerProvider().Tracer(tracerName)}
	}
	_, isNoop := tp.(noop.TracerProvider)
	return tracing{tracer: tp.Tracer(tracerName), enabled: !isNoop}
}

// link is the link to the producer's span whose context md carries, if any.
func link(md map[string]string) []trace.Link {
	sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier(md)))
	if !sc.IsValid() {
		return nil
	}
	return []trace.Link{{SpanContext: sc}}
}

// stored wraps the store satellite's handler: a span per delayed message, linked to its producer.
func (tr tracing) stored(queue string, handle message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	if !tr.enabled {
		return handle
	}
	return func(msg *message.Message) error {
		_, span := tr.tracer.Start(msg.Context(), "timeoutmill store",
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(link(msg.Metadata)...),
			trace.WithAttributes(
				attribute.String("messaging.destination.name", queue),
				attribute.String("messaging.message.id", msg.UUID),
				attribute.String("timeoutmill.destination", msg.Metadata.Get(wire.HeaderDestination)),
				attribute.String("timeoutmill.due", msg.Metadata.Get(wire.HeaderExpire)),
			))
		defer span.End()
		err := handle(msg)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return err
	}
}

// scheduled records a timeout Schedule stored, as a child of the caller's span and linked to the
// message's own trace when that is another.
func (tr tracing) scheduled(ctx context.Context, t persistence.Timeout, outcome string) {
	if !tr.enabled {
		return
	}
	_, span := tr.tracer.Start(ctx, "timeoutmill schedule", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(link(t.Metadata)...),
		trace.WithAttributes(
			attribute.String("messaging.message.id", t.ID),
			attribute.String("timeoutmill.destination", t.Destination),
			attribute.String("timeoutmill.due", wireparse.FormatExpire(t.Due)),
			attribute.String("timeoutmill.outcome", outcome),
		))
	span.End()
}

// dispatched records a timeout delivered at at, linked to the trace of the message that
// scheduled it. The span starts at the due time. So its length is the delivery's lateness.
func (tr tracing) dispatched(t persistence.Timeout, at time.Time) {
	if !tr.enabled {
		return
	}
	start := min64(t.Due, at)
	_, span := tr.tracer.Start(context.Background(), "timeoutmill dispatch",
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(start), trace.WithLinks(link(t.Metadata)...),
		trace.WithAttributes(
			attribute.String("messaging.destination.name", t.Destination),
			attribute.String("messaging.message.id", t.ID),
			attribute.String("timeoutmill.due", wireparse.FormatExpire(t.Due)),
			attribute.Int64("timeoutmill.lateness_us", at.Sub(t.Due).Microseconds()),
		))
	span.End(trace.WithTimestamp(at))
}

func min64(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
