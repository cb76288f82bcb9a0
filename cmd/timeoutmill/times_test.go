package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
)

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for value, want := range map[string]time.Time{
		"2026-12-31T00:00:00+01:00":    time.Date(2026, 12, 30, 23, 0, 0, 0, time.UTC),
		"2026-12-31T00:00:00.1234561Z": time.Date(2026, 12, 31, 0, 0, 0, 123457000, time.UTC), // never early
		"36h":                          now.Add(36 * time.Hour),
		"-90m":                         now.Add(-90 * time.Minute),
		"9999-12-31T23:59:59.999999Z":  persistence.MaxDue,
	} {
		got, err := parseWhen("--at", value, now)
		require.NoError(t, err, value)
		require.Equal(t, want, got, value)
	}
	for _, value := range []string{"10000-01-01T00:00:00Z", "9999-12-31T23:30:00-01:00", "9999-12-31T23:59:59.9999999Z"} {
		_, err := parseWhen("--at", value, now)
		require.ErrorIs(t, err, wireparse.ErrOutOfRange, value)
		require.ErrorIs(t, err, connect.ErrInvalid, value)
		require.ErrorContains(t, err, `--at "`+value+`" is out of range`, value)
	}
	_, err := parseWhen("--in", "1h", time.Date(9999, 12, 31, 23, 30, 0, 0, time.UTC))
	require.ErrorContains(t, err, `--in "1h" is out of range`)
	_, err = parseWhen("--at", "tomorrow", now)
	require.ErrorContains(t, err, `--at "tomorrow" is neither an RFC 3339 time`)
}

// TestCutoffOutOfRange: a --cutoff beyond the year 9999 is refused as out of range, before
// anything is opened.
func TestCutoffOutOfRange(t *testing.T) {
	t.Parallel()
	code, _, stderr := timeoutmill(context.Background(), "migrate", "--to", "rabbitmq-native", "--endpoint", "e",
		"--store", "postgres://app:topsecret@127.0.0.1:1/db", "--transport", "amqp://guest:guest@127.0.0.1:1/",
		"--cutoff", "10000-01-01T00:00:00Z")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `--cutoff "10000-01-01T00:00:00Z" is out of range`)
}
