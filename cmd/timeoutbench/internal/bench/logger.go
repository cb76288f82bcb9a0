package bench

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// NewLogger returns a Watermill logger writing to handler that drops the levels handler does not
// enable before building anything. Watermill's own slog adapter builds every Trace line's
// attributes and then asks slog, which costs the per-message handlers of the router and the
// Pub/Subs more than the benchmark should charge to the systems under test.
func NewLogger(handler slog.Handler) watermill.LoggerAdapter {
	return &levelLogger{
		log:   watermill.NewSlogLogger(slog.New(handler)),
		info:  handler.Enabled(context.Background(), slog.LevelInfo),
		debug: handler.Enabled(context.Background(), slog.LevelDebug),
		trace: handler.Enabled(context.Background(), watermill.LevelTrace),
	}
}

type levelLogger struct {
	log                watermill.LoggerAdapter
	info, debug, trace bool
}

func (l *levelLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.log.Error(msg, err, fields)
}

func (l *levelLogger) Info(msg string, fields watermill.LogFields) {
	if l.info {
		l.log.Info(msg, fields)
	}
}

func (l *levelLogger) Debug(msg string, fields watermill.LogFields) {
	if l.debug {
		l.log.Debug(msg, fields)
	}
}

func (l *levelLogger) Trace(msg string, fields watermill.LogFields) {
	if l.trace {
		l.log.Trace(msg, fields)
	}
}

func (l *levelLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &levelLogger{log: l.log.With(fields), info: l.info, debug: l.debug, trace: l.trace}
}
