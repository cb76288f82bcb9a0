package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

func TestParseCutoff(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	got, err := parseCutoff("", now)
	require.NoError(t, err)
	require.True(t, got.IsZero())
	got, err = parseCutoff("2026-12-31T00:00:00+01:00", now)
	require.NoError(t, err)
	require.True(t, got.Equal(time.Date(2026, 12, 30, 23, 0, 0, 0, time.UTC)))
	got, err = parseCutoff("36h", now)
	require.NoError(t, err)
	require.True(t, got.Equal(now.Add(36*time.Hour)))
	_, err = parseCutoff("tomorrow", now)
	require.ErrorContains(t, err, "neither an RFC 3339 time")
}

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newNativeBroker(t)
	dest := b.queue(t, "dest")
	path := filepath.Join(t.TempDir(), "t.db")
	store, err := sqlite.Open(ctx, sqlite.Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	now := time.Now()
	for i := range 30 {
		_, err := store.Store(ctx, persistence.Timeout{
			ID: fmt.Sprintf("t-%02d", i), Destination: dest, Due: now.Add(time.Duration(i-10) * time.Hour), Payload: []byte("x"),
		})
		require.NoError(t, err)
	}
	_, err = store.Store(ctx, persistence.Timeout{ID: "lost-soul", Destination: b.prefix + "-nowhere", Due: now, Payload: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, store.Close())

	flags := []string{"--transport", b.url, "--delay-prefix", b.prefix, "--endpoint", "orders", "--store", "sqlite://" + path}
	code, _, stderr := timeoutmill(ctx, append([]string{"native", "setup"}, flags[:4]...)...)
	require.Equal(t, 0, code, stderr)

	code, stdout, stderr := timeoutmill(ctx, append([]string{"migrate", "--to", "rabbitmq-native", "--dry-run"}, flags...)...)
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stdout, "timeouts:   31 (all) to 2 destination(s)")
	require.Contains(t, stdout, "destination queue "+b.prefix+"-nowhere does not exist (1 timeout(s))")
	require.Contains(t, stderr, "preflight: 1 problem(s)")

	code, stdout, stderr = timeoutmill(ctx, append([]string{"migrate", "--to", "rabbitmq-native", "--dry-run", "--skip-unmigratable"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "dry run:    nothing changed")

	code, stdout, stderr = timeoutmill(ctx, append([]string{"migrate", "--to", "rabbitmq-native", "--skip-unmigratable", "--batch", "4"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "migrated:   30 in")
	require.Contains(t, stdout, "unmigratable: 1 left in the store")
	require.Contains(t, stdout, "    lost-soul")
	require.Regexp(t, `progress: 31/31 timeouts \(30 migrated\), \d+/s, ETA 0s`, stderr, "plain progress lines when not on a terminal")

	code, stdout, stderr = timeoutmill(ctx, "stats", "--endpoint", "orders", "--store", "sqlite://"+path)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "pending:      1")

	code, _, stderr = timeoutmill(ctx, append([]string{"migrate", "--to", "kafka-native"}, flags...)...)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "rabbitmq-native")
}
