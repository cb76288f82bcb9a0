package main

import (
	"context"
	"errors"
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
	// StreamReplicas is validated by natstransport (1 to 5).
	StreamReplicas int `default:"1" help:"Replicas of the streams created on NATS JetStream: 1 on a single server, 3 in a cluster of three (survives the loss of a server). Streams that exist are used as they are."`
}

// transportOptions are the flags' settings beyond the URL.
func (f transportFlags) transportOptions() connect.TransportOptions {
	return connect.TransportOptions{QueueType: f.QueueType, Replicas: f.StreamReplicas}
}

func (f storeFlags) validate() error {
	return wireparse.ValidateName("--endpoint", f.Endpoint)
}

// openStore opens the store, retrying while the server is unreachable for up to wait (0: once);
// failed, if not nil, is told of each failed attempt.
func (f storeFlags) openStore(ctx context.Context, wait time.Duration, logger watermill.LoggerAdapter, failed func(error)) (persistence.Store, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	return retry(ctx, wait, logger, "store", func() (persistence.Store, error) {
		store, err := connect.OpenStore(ctx, f.Store, f.Endpoint)
		if err != nil && failed != nil {
			failed(err)
		}
		return store, err
	})
}

// openExistingStore opens the store without creating anything: the store of a command that only
// looks at or cancels timeouts. A missing table or SQLite file is an error that says nothing is
// there, naming it and the endpoint.
func (f storeFlags) openExistingStore(ctx context.Context) (persistence.Store, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	store, err := connect.OpenExistingStore(ctx, f.Store, f.Endpoint)
	if errors.Is(err, persistence.ErrNotSetUp) {
		return nil, fmt.Errorf("nothing is there for endpoint %q: %w; check --endpoint and --store "+
			"(timeoutmill setup creates the table)", f.Endpoint, err)
	}
	return store, err
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
		warn(logger, "Cannot reach the "+what+" yet; retrying", watermill.LogFields{"error": err, "until": deadline.Format(time.RFC3339)})
		select {
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

// newLogger returns the logger of a command: slog on stderr, as text or, with --log-format json,
// one JSON object a line (slog's JSONHandler: time, level, msg and the fields, durations as text
// such as "1m0s" rather than nanoseconds), at --log-level. Watermill's Info and Debug lines show
// at info and debug, its Error lines at every level; it has no warning level, so warn shows its
// Error lines and the command's own warnings (see warn).
func newLogger(e *env) watermill.LoggerAdapter {
	opts := &slog.HandlerOptions{Level: logLevel(e.level)}
	if e.format == "json" {
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		return slogLogger(slog.New(slog.NewJSONHandler(e.stderr, opts)))
	}
	return slogLogger(slog.New(slog.NewTextHandler(e.stderr, opts)))
}

// logLevel maps a --log-level onto slog's levels.
func logLevel(name string) slog.Level {
	switch name {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// logger is Watermill's slog adapter that can warn too.
type logger struct {
	watermill.LoggerAdapter
	slog *slog.Logger
}

func slogLogger(s *slog.Logger) logger {
	return logger{LoggerAdapter: watermill.NewSlogLogger(s), slog: s}
}

func (l logger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return slogLogger(l.slog.With(attrs(fields)...))
}

// Warn logs at slog's WARN level: shown at --log-level warn and below.
func (l logger) Warn(msg string, fields watermill.LogFields) {
	l.slog.Warn(msg, attrs(fields)...)
}

func attrs(fields watermill.LogFields) []any {
	args := make([]any, 0, 2*len(fields))
	for k, v := range fields {
		args = append(args, k, v)
	}
	return args
}

// warn logs a warning: something an operator should know that does not stop the command. A logger
// without a warning level (not the command's own) logs it as Info.
func warn(l watermill.LoggerAdapter, msg string, fields watermill.LogFields) {
	if w, ok := l.(interface {
		Warn(msg string, fields watermill.LogFields)
	}); ok {
		w.Warn(msg, fields)
		return
	}
	l.Info(msg, fields)
}
