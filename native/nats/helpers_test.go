package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/native/nats"
)

// server is a test's view of the real NATS server: its URL and a JetStream context, with a
// schedule stream and prefix of the test's own, deleted when the test ends.
type server struct {
	url    string
	conn   *natsgo.Conn
	js     jetstream.JetStream
	stream string
	prefix string
}

func newServer(t *testing.T) *server {
	t.Helper()
	url := testenv.NATSURL(t)
	conn, err := natsgo.Connect(url)
	require.NoError(t, err)
	js, err := jetstream.New(conn)
	require.NoError(t, err)
	id := unique(t)
	s := &server{url: url, conn: conn, js: js, stream: "sched_" + id, prefix: "sched." + id}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, s.stream)
		conn.Close()
	})
	return s
}

func unique(t *testing.T) string {
	t.Helper()
	var r [6]byte
	_, err := rand.Read(r[:])
	require.NoError(t, err)
	return hex.EncodeToString(r[:])
}

func (s *server) config() nats.Config {
	return nats.Config{URL: s.url, Stream: s.stream, SubjectPrefix: s.prefix}
}

// publisher returns a Publisher on the test's stream, closed when the test ends; setup runs
// Setup first.
func (s *server) publisher(t *testing.T, setup bool) *nats.Publisher {
	t.Helper()
	pub, err := nats.NewPublisher(s.config(), watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	if setup {
		require.NoError(t, pub.Setup(context.Background()))
	}
	return pub
}

// arrival is a message read from the destination subject, with when it arrived.
type arrival struct {
	msg jetstream.Msg
	at  time.Time
}

// consume reads every message stored on subject in the test's stream from now on, with its
// arrival time, until the test ends.
func (s *server) consume(t *testing.T, subject string) <-chan arrival {
	t.Helper()
	ctx := context.Background()
	cons, err := s.js.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	require.NoError(t, err)
	out := make(chan arrival, 100000)
	cc, err := cons.Consume(func(m jetstream.Msg) { out <- arrival{msg: m, at: time.Now()} })
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	return out
}

// next waits up to within for the next arrival.
func next(t *testing.T, ch <-chan arrival, within time.Duration) arrival {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return arrival{}
	}
}

// nothing asserts that nothing arrives for d.
func nothing(t *testing.T, ch <-chan arrival, d time.Duration) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("unexpected message on %s: %s", a.msg.Subject(), a.msg.Data())
	case <-time.After(d):
	}
}
