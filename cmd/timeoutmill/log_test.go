package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
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

// TestLogFormatJSON: with --log-format json every line is one JSON object with slog's time, level
// and msg, the fields as keys and an error as its text, at the --log-level chosen.
func TestLogFormatJSON(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	logger := newLogger(&env{stderr: &out, level: "info", format: "json"}).With(watermill.LogFields{"endpoint": "orders"})
	logger.Debug("a debug line", nil)
	logger.Info("an info line", watermill.LogFields{"n": 3})
	warn(logger, "a warning", watermill.LogFields{"k": "v"})
	logger.Error("an error", errors.New("boom"), nil)

	lines := jsonLines(t, out.String())
	require.Len(t, lines, 3, "debug is below info:\n%s", out.String())
	for i, want := range []struct{ level, msg string }{{"INFO", "an info line"}, {"WARN", "a warning"}, {"ERROR", "an error"}} {
		require.Equal(t, want.level, lines[i]["level"])
		require.Equal(t, want.msg, lines[i]["msg"])
		require.Equal(t, "orders", lines[i]["endpoint"])
		require.NotEmpty(t, lines[i]["time"])
	}
	require.EqualValues(t, 3, lines[0]["n"])
	require.Equal(t, "v", lines[1]["k"])
	require.Equal(t, "boom", lines[2]["error"])
}

// TestLogFormatFlag: --log-format (or TIMEOUTMILL_LOG_FORMAT) json makes every line a command
// writes on stderr JSON, its last, the error it exits with, too; text stays the default; other
// values are usage errors.
func TestLogFormatFlag(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	args := []string{"run", "--endpoint", "e", "--store", db, "--transport", "gochannel:", "--claim-lease", "10s"}

	code, _, stderr := timeoutmill(context.Background(), append([]string{"--log-format", "json"}, args...)...)
	require.Equal(t, 1, code, "refused for the transport")
	lines := jsonLines(t, stderr)
	require.GreaterOrEqual(t, len(lines), 2, stderr)
	require.Equal(t, "WARN", lines[0]["level"])
	require.Contains(t, lines[0]["msg"], "--claim-lease is shorter")
	require.Equal(t, "10s", lines[0]["claim_lease"], "a duration as text")
	last := lines[len(lines)-1]
	require.Equal(t, "ERROR", last["level"])
	require.Contains(t, last["msg"], "timeoutmill: ")
	require.Contains(t, last["msg"], "gochannel")
	require.EqualValues(t, 1, last["exit_code"])

	code, _, stderr = timeoutmill(context.Background(), args...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `level=WARN msg="--claim-lease is shorter`, "text by default")
	require.Contains(t, stderr, "\ntimeoutmill: ")

	t.Setenv("TIMEOUTMILL_LOG_FORMAT", "json")
	code, _, stderr = timeoutmill(context.Background(), args...)
	require.Equal(t, 1, code)
	require.NotEmpty(t, jsonLines(t, stderr), "from the environment too")

	code, _, stderr = timeoutmill(context.Background(), append([]string{"--log-format", "logfmt"}, args...)...)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `"text","json"`)
}

// jsonLines parses each line of out as a JSON object, failing t on any other line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "not a JSON line: %q", line)
		lines = append(lines, m)
	}
	return lines
}
