package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// nativeBroker gives a test a delay prefix of its own on the test RabbitMQ, and removes what was
// declared under it when the test ends.
type nativeBroker struct {
	url    string
	prefix string
	conn   *amqp.Connection
}

func newNativeBroker(t *testing.T) *nativeBroker {
	t.Helper()
	url := testenv.AMQPURL(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	var r [6]byte
	_, _ = rand.Read(r[:])
	b := &nativeBroker{url: url, prefix: "cmdnative-" + hex.EncodeToString(r[:]), conn: conn}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			topo, _ := nativedelay.NewTopology(b.prefix, "")
			for level := 0; level < nativedelay.Levels; level++ {
				_, _ = ch.QueueDelete(topo.Queue(level), false, false, false)
				_ = ch.ExchangeDelete(topo.Exchange(level), false, false)
			}
			_, _ = ch.QueueDelete(topo.ProbeQueue(), false, false, false)
			_ = ch.ExchangeDelete(topo.DeliveryExchange(), false, false)
			_, _ = ch.QueueDelete(topo.UnroutableQueue(), false, false, false)
			_ = ch.ExchangeDelete(topo.DestinationsExchange(), false, false)
			_ = ch.ExchangeDelete(topo.UnroutableExchange(), false, false)
			_ = ch.Close()
		}
		_ = conn.Close()
	})
	return b
}

// queue declares a durable queue named after the prefix, deleted when the test ends.
func (b *nativeBroker) queue(t *testing.T, suffix string) string {
	t.Helper()
	name := b.prefix + "-" + suffix
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDeclare(name, true, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		if ch, err := b.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	})
	return name
}

func TestNativeSetupAndVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newNativeBroker(t)
	flags := []string{"--transport", b.url, "--delay-prefix", b.prefix}

	code, _, stderr := timeoutmill(ctx, append([]string{"native", "verify"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "exchange "+b.prefix+".delay-level-27 is missing")
	require.Contains(t, stderr, "queue "+b.prefix+".delay-level-00 is missing")
	require.NotContains(t, stderr, "guest:guest", "no password in output")

	for range 2 {
		code, stdout, stderr := timeoutmill(ctx, append([]string{"native", "setup"}, flags...)...)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "native delay infrastructure ready")
	}
	code, stdout, stderr := timeoutmill(ctx, append([]string{"native", "verify"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, ": ok")

	// --destination binds existing queues (replacing the legacy "#.QUEUE"), and creates none.
	dest := b.queue(t, "orders")
	code, stdout, stderr = timeoutmill(ctx, append([]string{"native", "setup", "--destination", dest}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "destinations bound through "+b.prefix+".delay-destinations")
	require.Contains(t, stdout, dest)
	code, _, stderr = timeoutmill(ctx, append([]string{"native", "setup", "--destination", dest + "-missing"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, dest+"-missing")

	ch, err := b.conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete(b.prefix+".delay-level-13", false, false, false)
	require.NoError(t, err)
	require.NoError(t, ch.Close())
	code, _, stderr = timeoutmill(ctx, append([]string{"native", "verify"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "1 problem(s)")
	require.Contains(t, stderr, "queue "+b.prefix+".delay-level-13 is missing")
}

func TestNativeVerifyReadsTheEnvironmentAndRefusesOtherSchemes(t *testing.T) {
	b := newNativeBroker(t)
	t.Setenv("TIMEOUTMILL_TRANSPORT", b.url)
	t.Setenv("TIMEOUTMILL_DELAY_PREFIX", b.prefix)
	t.Setenv("TIMEOUTMILL_DELAY_QUEUE_TYPE", "classic")
	code, stdout, stderr := timeoutmill(context.Background(), "native", "setup")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "prefix "+b.prefix+", classic queues")

	code, _, stderr = timeoutmill(context.Background(), "native", "verify", "--transport", "kafka://u:secret@h")
	require.Equal(t, 1, code)
	require.True(t, strings.Contains(stderr, "invalid") || strings.Contains(stderr, "scheme"), stderr)
	require.NotContains(t, stderr, "secret")
}
