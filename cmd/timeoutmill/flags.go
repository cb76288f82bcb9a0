package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// storeFlags name an endpoint and its store.
type storeFlags struct {
	Endpoint string `required:"" help:"Endpoint name: its queues are ENDPOINT.Timeouts and ENDPOINT.TimeoutsDispatcher."`
	Store    string `required:"" help:"Store DSN: ${store_schemes}." placeholder:"DSN"`
}

// transportFlags name the broker.
type transportFlags struct {
	Transport  string `required:"" help:"Transport URL: ${transport_schemes}." placeholder:"URL"`
	ErrorQueue string `default:"error" help:"Queue for messages that cannot be handled."`
	QueueType  string `default:"classic" enum:"classic,quorum" help:"Type of the queues created on RabbitMQ: classic, or quorum (replicated, for a cluster). Queues that exist are used as they are."`
}

// transportOptions are the flags' settings beyond the URL.
func (f transportFlags) transportOptions() connect.TransportOptions {
	return connect.TransportOptions{QueueType: f.QueueType}
}

func (f storeFlags) validate() error {
	return wireparse.ValidateName("--endpoint", f.Endpoint)
}

// openStore opens the store, retrying while the server is unreachable for up to wait (0: once).
func (f storeFlags) openStore(ctx context.Context, wait time.Duration, logger watermill.LoggerAdapter) (persistence.Store, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	return retry(ctx, wait, logger, "store", func() (persistence.Store, error) {
		return connect.OpenStore(ctx, f.Store, f.Endpoint)
	})
}

// retry calls open until it succeeds, fails for good (connect.Permanent), ctx ends, or wait has
// passed since the first failure.
func retry[T any](ctx context.Context, wait time.Duration, logger watermill.LoggerAdapter, what string, open func() (T, error)) (T, error) {
	deadline := time.Now().Add(wait)
	for {
		v, err := open()
		if err == nil || connect.Permanent(err) || wait <= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return v, err
		}
		logger.Error("Cannot reach the "+what+" yet; retrying", err, watermill.LogFields{"until": deadline.Format(time.RFC3339)})
		select {
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

func newLogger(e *env) watermill.LoggerAdapter {
	level := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "error": slog.LevelError}[e.level]
	return watermill.NewSlogLogger(slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})))
}
