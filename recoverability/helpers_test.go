package recoverability_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/wire"
)

const (
	workQueue   = "orders"
	handlerName = "orders-handler"
)

// pubSub is what a test runs on: GoChannel, or durableQueues where a restart must keep messages.
type pubSub interface {
	message.Publisher
	message.Subscriber
}

type testBundle struct {
	retries *recoverability.Retries
	router  *message.Router
	calls   *callLog
}

// newGoChannel returns a GoChannel closed when the test ends.
func newGoChannel(t *testing.T) *gochannel.GoChannel {
	t.Helper()
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}

// baseConfig is a deferred queue for the "orders" work queue with a short schedule.
func baseConfig(ps pubSub) recoverability.Config {
	return recoverability.Config{
		WorkQueue:                 workQueue,
		DeferredQueue:             wire.DeferredQueue("orders", "test-1"),
		DurationToIgnoreOnFailure: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond},
		Publisher:                 ps,
		Subscriber:                ps,
	}
}

// start runs a router with one handler on the work queue, wrapped with the retries of cfg.
// outcome decides each call: nil succeeds.
func start(t *testing.T, ps pubSub, cfg recoverability.Config, outcome func(call int, msg *message.Message) error) *testBundle {
	t.Helper()
	retries, err := recoverability.New(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)

	calls := &callLog{}
	handler := router.AddConsumerHandler(handlerName, cfg.WorkQueue, ps, func(msg *message.Message) error {
		n := calls.record(msg)
		if outcome == nil {
			return nil
		}
		return outcome(n, msg)
	})
	handler.AddMiddleware(retries.Middleware)
	require.NoError(t, retries.AddToRouter(router))
	runRouter(t, router)
	return &testBundle{retries: retries, router: router, calls: calls}
}

// runRouter runs router until the test ends.
func runRouter(t *testing.T, router *message.Router) {
	t.Helper()
	stopped := make(chan struct{})
	var runErr error
	go func() {
		defer close(stopped)
		runErr = router.Run(context.Background())
	}()
	t.Cleanup(func() {
		_ = router.Close()
		<-stopped
	})
	select {
	case <-router.Running():
	case <-stopped:
		t.Fatalf("router stopped at start: %v", runErr)
	}
}

// call is one call of the handler under test.
type call struct {
	uuid     string
	at       time.Time
	metadata message.Metadata
}

type callLog struct {
	mu    sync.Mutex
	calls []call
}

func (l *callLog) record(msg *message.Message) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	md := message.Metadata{}
	for k, v := range msg.Metadata {
		md[k] = v
	}
	l.calls = append(l.calls, call{uuid: msg.UUID, at: time.Now(), metadata: md})
	n := 0
	for _, c := range l.calls {
		if c.uuid == msg.UUID {
			n++
		}
	}
	return n
}

// of returns the calls made for one message.
func (l *callLog) of(uuid string) []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []call
	for _, c := range l.calls {
		if c.uuid == uuid {
			out = append(out, c)
		}
	}
	return out
}

func (l *callLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// waitCalls waits until the message was handled n times.
func (l *callLog) waitCalls(t *testing.T, uuid string, n int, within time.Duration) []call {
	t.Helper()
	require.Eventually(t, func() bool { return len(l.of(uuid)) >= n }, within, 5*time.Millisecond,
		"message %s: %d of %d calls within %s", uuid, len(l.of(uuid)), n, within)
	return l.of(uuid)
}

type arrival struct {
	msg *message.Message
	at  time.Time
}

// subscribe acks and returns what arrives on topic (GoChannel fans out: it sees copies).
func subscribe(t *testing.T, sub message.Subscriber, topic string) <-chan arrival {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	out := make(chan arrival, 1<<16)
	go func() {
		for m := range msgs {
			out <- arrival{msg: m, at: time.Now()}
			m.Ack()
		}
	}()
	return out
}

func await(t *testing.T, ch <-chan arrival, within time.Duration) arrival {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return arrival{}
	}
}

func requireNothing(t *testing.T, ch <-chan arrival, during time.Duration) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("unexpected message %s (%v)", a.msg.UUID, a.msg.Metadata)
	case <-time.After(during):
	}
}

// waiting returns a message that must be ignored until the given time.
func waiting(payload string, until time.Time) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(wire.HeaderRetryIgnoreUntil, until.UTC().Format(time.RFC3339Nano))
	return msg
}

// countingPublisher counts the messages published to each topic.
type countingPublisher struct {
	message.Publisher
	mu sync.Mutex
	n  map[string]int
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[topic] += len(msgs)
	p.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

func (p *countingPublisher) count(topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[topic]
}

var errRefused = errors.New("payment provider refused the charge")
