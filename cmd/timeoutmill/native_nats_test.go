package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
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
