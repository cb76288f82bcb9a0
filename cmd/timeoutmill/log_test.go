package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"
)

// TestLogLevels: each --log-level shows the lines of its level and above, Watermill's and the
// command's own warnings alike, also on a logger made With fields.
func TestLogLevels(t *testing.T) {
	t.Parallel()
	for level, want := range map[string][]string{
		"debug": {"DEBUG", "INFO", "WARN", "ERROR"},
		"info":  {"INFO", "WARN", "ERROR"},
		"warn":  {"WARN", "ERROR"},
		"error": {"ERROR"},
	} {
		var out bytes.Buffer
		logger := newLogger(&env{stderr: &out, level: level}).With(watermill.LogFields{"endpoint": "orders"})
		logger.Trace("a trace", nil)
		logger.Debug("a debug line", nil)
		logger.Info("an info line", nil)
		warn(logger, "a warning", watermill.LogFields{"k": "v"})
		logger.Error("an error", errors.New("boom"), nil)

		var got []string
		for _, l := range []string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR"} {
			if bytes.Contains(out.Bytes(), []byte("level="+l+" ")) {
				got = append(got, l)
			}
		}
		require.Equal(t, want, got, "--log-level %s:\n%s", level, out.String())
		require.NotContains(t, out.String(), "a trace")
		require.Contains(t, out.String(), "endpoint=orders")
	}
	var out bytes.Buffer
	plain := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(&out, nil)))
	warn(plain, "x", nil)
	require.Contains(t, out.String(), "level=INFO msg=x", "a logger without a warning level logs it as Info")
}

func TestLogLevelFlag(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	args := []string{"run", "--endpoint", "e", "--store", db, "--transport", "gochannel:", "--claim-lease", "10s"}
	for level, shown := range map[string]bool{"debug": true, "info": true, "warn": true, "error": false} {
		code, _, stderr := timeoutmill(context.Background(), append([]string{"--log-level", level}, args...)...)
		require.Equal(t, 1, code, "refused for the transport")
		require.Equal(t, shown, bytes.Contains([]byte(stderr), []byte(`level=WARN msg="--claim-lease is shorter`)), "--log-level %s:\n%s", level, stderr)
	}
	code, _, stderr := timeoutmill(context.Background(), append([]string{"--log-level", "verbose"}, args...)...)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `"debug","info","warn","error"`)
}
