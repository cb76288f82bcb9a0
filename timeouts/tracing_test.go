package timeouts_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// TestTraceAcrossTheDelay: a delayed message keeps its producer's trace through the Timeouts
// queue, the store and a restart of the manager between storing and dispatching: the delivered
// message continues the producer's trace, and the store and dispatch spans link to its span.
func TestTraceAcrossTheDelay(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		exporter := tracetest.NewInMemoryExporter()
		provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
		t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
		withTracing := func(c *timeouts.Config) { c.TracerProvider = provider }

		store := memory.New().(memStore)
		first := setup(t, store, withTracing)

		ctx, producer := provider.Tracer("producer").Start(context.Background(), "place order")
		published := message.NewMessage(watermill.NewUUID(), []byte("through the queue"))
		published.SetContext(ctx)
		timeouts.DeliverAfter(published, 600*time.Millisecond)
		require.NoError(t, first.manager.Publisher().Publish("traced", published))
		scheduled := message.NewMessage(watermill.NewUUID(), []byte("scheduled"))
		timeouts.DeliverAfter(scheduled, 600*time.Millisecond)
		_, err := first.manager.Schedule(ctx, "traced", scheduled) // the trace of ctx
		require.NoError(t, err)
		producer.End()
		st, err := store.Stats(context.Background(), time.Now())
		require.NoError(t, err)
		require.Equal(t, 2, st.Pending, "stored: Publish on a GoChannel that waits for acks, and Schedule, return once stored")

		// The manager restarts between storing and dispatching (closing the router closes its
		// GoChannel: the new process has its own).
		require.NoError(t, first.router.Close())
		<-first.manager.Done()
		_, arrivals := setupSubscribed(t, store, "traced", withTracing)

		want := producer.SpanContext()
		for range 2 {
			a := await(t, arrivals, 10*time.Second)
			got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(a.msg.Metadata)))
			require.True(t, got.IsValid(), "%s carries a traceparent", a.msg.Payload)
			require.Equal(t, want.TraceID(), got.TraceID(), "%s continues the producer's trace", a.msg.Payload)
			require.Equal(t, want.SpanID(), got.SpanID(), "%s: its parent is the producer's span", a.msg.Payload)
		}

		linked := func() map[string]int {
			out := map[string]int{}
			for _, span := range exporter.GetSpans() {
				for _, l := range span.Links {
					if l.SpanContext.SpanID() == want.SpanID() {
						out[span.Name]++
					}
				}
			}
			return out
		}
		wantLinked := map[string]int{"timeoutmill store": 1, "timeoutmill schedule": 1, "timeoutmill dispatch": 2}
		// The dispatch span ends once the timeout is removed, just after the delivery.
		synctest.Wait()
		require.Equal(t, wantLinked, linked(), "spans linked to the producer's span")
	})
}

// TestNoTracingByDefault: without a TracerProvider, messages are not given trace headers they
// did not bring, and nothing is recorded.
func TestNoTracingByDefault(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, memory.New(), nil)
		arrivals := subscribe(t, b.pubSub, "untraced")
		msg := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(msg, 50*time.Millisecond)
		_, err := b.manager.Schedule(t.Context(), "untraced", msg)
		require.NoError(t, err)
		a := await(t, arrivals, 10*time.Second)
		require.Empty(t, a.msg.Metadata.Get("traceparent"))
	})
}
