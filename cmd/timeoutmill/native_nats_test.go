package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// natsSchedules gives a test a schedule stream and subject prefix of its own on the test NATS
// server, and deletes the stream when the test ends.
func natsSchedules(t *testing.T) (url, stream, prefix string, js jetstream.JetStream) {
	t.Helper()
	url = testenv.NATSURL(t)
	conn, err := natsgo.Connect(url)
	require.NoError(t, err)
	js, err = jetstream.New(conn)
	require.NoError(t, err)
	var r [6]byte
	_, _ = rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	stream, prefix = "cmdnative_"+id, "cmdnative."+id
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
		conn.Close()
	})
	return url, stream, prefix, js
}

func TestNativeSetupAndVerifyOnNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, stream, prefix, js := natsSchedules(t)
	flags := []string{"--transport", url, "--nats-stream", stream, "--nats-subject-prefix", prefix}

	code, _, stderr := timeoutmill(ctx, append([]string{"native", "verify"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "stream "+stream+" does not exist")

	dest := prefix + "-orders"
	code, stdout, stderr := timeoutmill(ctx, append([]string{"native", "setup", "--destination", dest}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "message schedules allowed")
	require.Contains(t, stdout, "destinations captured by "+stream+": "+dest)
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	require.True(t, s.CachedInfo().Config.AllowMsgSchedules)
	require.ElementsMatch(t, []string{prefix + ".>", dest}, s.CachedInfo().Config.Subjects)

	code, stdout, stderr = timeoutmill(ctx, append([]string{"native", "verify"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "ok")

	// A limit that would remove pending schedules is a problem verify names.
	cfg := s.CachedInfo().Config
	cfg.MaxAge = time.Hour
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	code, _, stderr = timeoutmill(ctx, append([]string{"native", "verify"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "MaxAge")

	// Setup again is idempotent and keeps the destination.
	code, _, stderr = timeoutmill(ctx, append([]string{"native", "setup"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	s, err = js.Stream(ctx, stream)
	require.NoError(t, err)
	require.Contains(t, s.CachedInfo().Config.Subjects, dest)

	code, _, stderr = timeoutmill(ctx, append([]string{"native", "unroutable", "list"}, flags...)...)
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "RabbitMQ's")
}

func TestMigrateCommandToNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, stream, prefix, js := natsSchedules(t)
	dest := prefix + "-dest"
	foreign := prefix + "-foreign"
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream + "_other", Subjects: []string{foreign}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream+"_other") })

	path := filepath.Join(t.TempDir(), "t.db")
	store, err := sqlite.Open(ctx, sqlite.Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	now := time.Now()
	for i := range 30 {
		_, err := store.Store(ctx, persistence.Timeout{
			ID: fmt.Sprintf("t-%02d", i), Destination: dest, Due: now.Add(time.Duration(i+1) * time.Hour), Payload: []byte("x"),
		})
		require.NoError(t, err)
	}
	_, err = store.Store(ctx, persistence.Timeout{ID: "lost-soul", Destination: foreign, Due: now.Add(time.Hour), Payload: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, store.Close())

	natsFlags := []string{"--transport", url, "--nats-stream", stream, "--nats-subject-prefix", prefix}
	flags := append([]string{"--endpoint", "orders", "--store", "sqlite://" + path}, natsFlags...)
	code, _, stderr := timeoutmill(ctx, append([]string{"native", "setup"}, natsFlags...)...)
	require.Equal(t, 0, code, stderr)

	code, _, stderr = timeoutmill(ctx, append([]string{"migrate", "--to", "rabbitmq-native"}, flags...)...)
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "--to rabbitmq-native needs an amqp:// --transport")

	code, stdout, stderr := timeoutmill(ctx, append([]string{"migrate", "--to", "nats-native", "--dry-run"}, flags...)...)
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stdout, "timeouts:   31 (all) to 2 destination(s)")
	require.Contains(t, stdout, "is captured by stream "+stream+"_other")
	require.Contains(t, stderr, "preflight: 1 problem(s)")

	code, stdout, stderr = timeoutmill(ctx, append([]string{"migrate", "--to", "nats-native", "--skip-unmigratable", "--batch", "4"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "migrated:   30 in")
	require.Contains(t, stdout, "    lost-soul")

	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+".>"))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, 30, "one schedule per migrated timeout")
	require.Contains(t, info.State.Subjects, prefix+".t-07")
}
