package acceptance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// nativeLateBound is how late a natively delayed message may arrive: each level's queue holds it
// exactly its TTL, and dead-lettering from level to level takes milliseconds, so it arrives
// within about a second of its due time; the bound leaves room for a busy machine.
const nativeLateBound = 2 * time.Second

// nativeManagerLateBound is how late a message the timeout manager stores may arrive: generous,
// as the tests run in parallel under the race detector on two cores. Not a speed assertion.
const nativeManagerLateBound = 10 * time.Second

// nativeEnv is a delay infrastructure of a test's own (a random prefix) on the test RabbitMQ,
// set up, with a native Publisher; everything declared under the prefix goes when the test ends.
type nativeEnv struct {
	url    string
	prefix string
	conn   *amqp.Connection
	topo   nativedelay.Topology
	pub    *rabbitmq.Publisher
}

func newNativeEnv(t *testing.T) *nativeEnv {
	t.Helper()
	url := testenv.AMQPURL(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	var r [6]byte
	_, err = rand.Read(r[:])
	require.NoError(t, err)
	e := &nativeEnv{url: url, prefix: "accnative-" + hex.EncodeToString(r[:]), conn: conn}
	e.topo, err = nativedelay.NewTopology(e.prefix, rabbitmq.Quorum)
	require.NoError(t, err)
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err == nil {
			for level := 0; level < nativedelay.Levels; level++ {
				_, _ = ch.QueueDelete(e.topo.Queue(level), false, false, false)
				_ = ch.ExchangeDelete(e.topo.Exchange(level), false, false)
			}
			_, _ = ch.QueueDelete(e.topo.ProbeQueue(), false, false, false)
			_ = ch.ExchangeDelete(e.topo.DeliveryExchange(), false, false)
			_, _ = ch.QueueDelete(e.topo.UnroutableQueue(), false, false, false)
			_ = ch.ExchangeDelete(e.topo.DestinationsExchange(), false, false)
			_ = ch.ExchangeDelete(e.topo.UnroutableExchange(), false, false)
			_ = ch.Close()
		}
		_ = conn.Close()
	})
	require.NoError(t, e.topo.Setup(context.Background(), conn))
	e.pub, err = rabbitmq.NewPublisher(rabbitmq.Config{URL: url, Prefix: e.prefix}, testLogger())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.pub.Close()) })
	return e
}

// queue declares a durable queue named after the prefix and removes it when the test ends.
func (e *nativeEnv) queue(t *testing.T, suffix string) string {
	t.Helper()
	name := e.prefix + "." + suffix
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDeclare(name, true, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		if ch, err := e.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	})
	return name
}

// nativeArrivals records every message a queue receives, as an endpoint consuming it with
// amqptransport's Subscriber would.
type nativeArrivals struct {
	mu     sync.Mutex
	at     map[string][]time.Time
	msgs   map[string]*message.Message
	notify chan struct{}
}

func (e *nativeEnv) receive(t *testing.T, queue string) *nativeArrivals {
	t.Helper()
	sub, err := amqptransport.NewSubscriber(amqptransport.Config{URL: e.url, ConnectionName: "receiver " + queue, Consumers: 4, PrefetchCount: 256}, testLogger())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(ctx, queue)
	require.NoError(t, err)
	a := &nativeArrivals{at: map[string][]time.Time{}, msgs: map[string]*message.Message{}, notify: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			a.mu.Lock()
			a.at[m.UUID] = append(a.at[m.UUID], time.Now())
			a.msgs[m.UUID] = m
			a.mu.Unlock()
			m.Ack()
			select {
			case a.notify <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sub.Close())
		<-done
	})
	return a
}

// distinct is how many different messages arrived.
func (a *nativeArrivals) distinct() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// duplicates lists the ids that arrived more than once.
func (a *nativeArrivals) duplicates() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var dups []string
	for id, ts := range a.at {
		if len(ts) > 1 {
			dups = append(dups, id)
		}
	}
	return dups
}

// wait waits until n different messages arrived, or fails the test after within.
func (a *nativeArrivals) wait(t *testing.T, n int, within time.Duration) {
	t.Helper()
	if !a.waitFor(n, within) {
		t.Fatalf("%d of %d messages arrived within %s", a.distinct(), n, within)
	}
}

// waitFor waits until n different messages arrived and reports whether they did within.
func (a *nativeArrivals) waitFor(n int, within time.Duration) bool {
	deadline := time.After(within)
	for a.distinct() < n {
		select {
		case <-a.notify:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			return false
		}
	}
	return true
}

// first returns when the message with id first arrived, and the message.
func (a *nativeArrivals) first(id string) (time.Time, *message.Message, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ts, ok := a.at[id]
	if !ok {
		return time.Time{}, nil, false
	}
	return ts[0], a.msgs[id], true
}

// nativeBinary builds cmd/timeoutmill, as shipped (no -race), into a directory of the test's own.
func nativeBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "timeoutmill")
	out, err := exec.Command("go", "build", "-o", path, "github.com/timeoutmill/timeoutmill/cmd/timeoutmill").CombinedOutput()
	require.NoError(t, err, "go build ./cmd/timeoutmill:\n%s", out)
	return path
}
