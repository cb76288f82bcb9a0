package amqptransport_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/amqpmarshal"
	"github.com/timeoutmill/timeoutmill/internal/announce"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// testBundle is one test's view of the broker.
type testBundle struct {
	url    string
	name   string // unique prefix of this test's queues and connections
	config amqptransport.Config
	raw    *amqp.Connection // a plain amqp091 connection, for looking behind the transport
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url := testenv.AMQPURL(t)
	raw, err := amqp.Dial(url)
	require.NoError(t, err)
	b := &testBundle{url: url, name: "amqptransport-" + randomHex(t), raw: raw}
	b.config = amqptransport.Config{URL: url, ConnectionName: b.name}
	t.Cleanup(func() {
		// Delete this test's queues so that re-runs leave nothing behind.
		for _, q := range b.queues(t) {
			b.channel(t, func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
		}
		_ = raw.Close()
	})
	return b
}

func randomHex(t *testing.T) string {
	t.Helper()
	var b [5]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

// queue names a queue of this test.
func (b *testBundle) queue(suffix string) string { return b.name + "." + suffix }

// queues lists this test's queues on the broker (each test's names share its prefix).
func (b *testBundle) queues(t *testing.T) []string {
	var names []string
	for _, q := range []string{"a", "b", "existing", "pipe", "E.Timeouts", "E.TimeoutsDispatcher", "error", "converted", "competing", "reconnect", "rate", "many", "exclusive"} {
		if b.exists(t, b.queue(q)) {
			names = append(names, b.queue(q))
		}
	}
	return names
}

// channel runs use on a fresh channel of the raw connection.
func (b *testBundle) channel(t *testing.T, use func(ch *amqp.Channel) error) error {
	t.Helper()
	ch, err := b.raw.Channel()
	require.NoError(t, err)
	err = use(ch)
	if !ch.IsClosed() {
		_ = ch.Close()
	}
	return err
}

// exists asks the broker whether queue exists, without creating it.
func (b *testBundle) exists(t *testing.T, queue string) bool {
	err := b.channel(t, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false
	}
	require.NoError(t, err)
	return true
}

// count is how many messages are ready in queue.
func (b *testBundle) count(t *testing.T, queue string) int {
	t.Helper()
	n := 0
	require.NoError(t, b.channel(t, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		n = q.Messages
		return err
	}))
	return n
}

// requireDurable fails unless queue exists and is durable: an active declaration with
// durable=true succeeds only on an existing durable queue (or creates one, hence exists first).
func (b *testBundle) requireDurable(t *testing.T, queue string) {
	t.Helper()
	require.True(t, b.exists(t, queue), "queue %s exists", queue)
	require.NoError(t, b.channel(t, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
		return err
	}), "queue %s is durable", queue)
}

// get takes one message from queue with basic.get, or fails.
func (b *testBundle) get(t *testing.T, queue string) amqp.Delivery {
	t.Helper()
	var d amqp.Delivery
	require.Eventually(t, func() bool {
		var ok bool
		require.NoError(t, b.channel(t, func(ch *amqp.Channel) error {
			var err error
			d, ok, err = ch.Get(queue, true)
			return err
		}))
		return ok
	}, 10*time.Second, 20*time.Millisecond, "a message on %s", queue)
	return d
}

func newPublisher(t *testing.T, c amqptransport.Config) *amqptransport.Publisher {
	t.Helper()
	pub, err := amqptransport.NewPublisher(c, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return pub
}

func newSubscriber(t *testing.T, c amqptransport.Config) *amqptransport.Subscriber {
	t.Helper()
	sub, err := amqptransport.NewSubscriber(c, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	return sub
}

func receive(t *testing.T, ch <-chan *message.Message, within time.Duration) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		require.True(t, ok, "subscription closed")
		m.Ack()
		return m
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return nil
	}
}

// publishMany publishes n empty messages to q in one call, the i-th with UUID id(i).
func publishMany(t *testing.T, pub *amqptransport.Publisher, q string, n int, id func(i int) string) []*message.Message {
	t.Helper()
	batch := make([]*message.Message, n)
	for i := range batch {
		batch[i] = message.NewMessage(id(i), nil)
	}
	require.NoError(t, pub.Publish(q, batch...))
	return batch
}

// take is receive without the ack: the caller settles the message.
func take(t *testing.T, ch <-chan *message.Message, within time.Duration) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		require.True(t, ok, "subscription closed")
		return m
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return nil
	}
}

func TestPublishDeclaresADurableQueueFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newPublisher(t, b.config)
	q := b.queue("a")
	require.False(t, b.exists(t, q))

	msg := message.NewMessage(watermill.NewUUID(), []byte("not into the void"))
	msg.Metadata.Set("k", "v")
	require.NoError(t, pub.Publish(q, msg), "nobody declared the queue: the publisher does")

	b.requireDurable(t, q)
	d := b.get(t, q)
	require.Equal(t, "not into the void", string(d.Body))
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, msg.UUID, d.MessageId)
	require.Equal(t, "v", d.Headers["k"])
}

func TestAnExistingQueueIsUsedWhateverItsArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("existing")
	// A queue an operator made with arguments timeoutmill does not know: an active declaration
	// without them would fail with PRECONDITION_FAILED and close the channel.
	require.NoError(t, b.channel(t, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-max-length": int32(100)})
		return err
	}))
	pub := newPublisher(t, b.config)
	sub := newSubscriber(t, b.config)
	msgs, err := sub.Subscribe(t.Context(), q)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(q, message.NewMessage(watermill.NewUUID(), []byte("fits"))))
	require.Equal(t, "fits", string(receive(t, msgs, 10*time.Second).Payload))
}

func TestUndeclarableDestinationFailsThePublishAndNothingElse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newPublisher(t, b.config)
	// amq.* names are reserved: RabbitMQ refuses to create them (ACCESS_REFUSED).
	err := pub.Publish("amq.timeoutmill-"+randomHex(t), message.NewMessage(watermill.NewUUID(), nil))
	require.Error(t, err)
	var ae *amqp.Error
	require.True(t, errors.As(err, &ae), "the broker's refusal is reachable: %v", err)
	require.Equal(t, amqp.AccessRefused, ae.Code)
	t.Logf("publishing to a reserved name: %v", err)

	// The publisher's pooled channels are untouched: the next publishes work.
	q := b.queue("b")
	for i := range 20 {
		require.NoError(t, pub.Publish(q, message.NewMessage(watermill.NewUUID(), []byte{byte(i)})))
	}
}

func TestEmptyAndOverlongTopicsAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newPublisher(t, b.config)
	require.ErrorIs(t, pub.Publish("", message.NewMessage("x", nil)), amqptransport.ErrInvalidTopic)
	require.ErrorIs(t, pub.Publish(strings.Repeat("q", 256), message.NewMessage("x", nil)), amqptransport.ErrInvalidTopic)
	sub := newSubscriber(t, b.config)
	_, err := sub.Subscribe(t.Context(), "")
	require.ErrorIs(t, err, amqptransport.ErrInvalidTopic)
}

func TestDeclareEndpointIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newPublisher(t, b.config)
	endpoint := b.name + ".E"
	errorQueue := b.queue("error")
	for range 3 {
		require.NoError(t, pub.DeclareEndpoint(t.Context(), endpoint, errorQueue))
	}
	b.requireDurable(t, wire.TimeoutsQueue(endpoint))
	b.requireDurable(t, wire.DispatcherQueue(endpoint))
	b.requireDurable(t, errorQueue)

	// A queue deleted behind the publisher's back is declared again by DeclareEndpoint, which
	// does not trust what it declared before.
	require.NoError(t, b.channel(t, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(wire.TimeoutsQueue(endpoint), false, false, false)
		return err
	}))
	require.NoError(t, pub.DeclareEndpoint(t.Context(), endpoint, errorQueue))
	b.requireDurable(t, wire.TimeoutsQueue(endpoint))

	require.Error(t, pub.DeclareEndpoint(t.Context(), "", errorQueue))
	require.Error(t, pub.DeclareEndpoint(t.Context(), "with space", errorQueue))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, pub.DeclareEndpoint(ctx, endpoint+"2", errorQueue), context.Canceled)
}

func TestQueueSemanticsEachMessageToOneSubscriber(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("competing")
	pub := newPublisher(t, b.config)
	const n = 300
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		per  [2]int
	)
	for i := range 2 {
		sub := newSubscriber(t, b.config)
		msgs, err := sub.Subscribe(t.Context(), q)
		require.NoError(t, err)
		go func() {
			for m := range msgs {
				mu.Lock()
				seen[m.UUID]++
				per[i]++
				mu.Unlock()
				m.Ack()
			}
		}()
	}
	for range n {
		require.NoError(t, pub.Publish(q, message.NewMessage(watermill.NewUUID(), nil)))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	}, 20*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		require.Equal(t, 1, c, "message %s delivered %d times", id, c)
	}
	require.Positive(t, per[0])
	require.Positive(t, per[1])
	t.Logf("%d messages shared by two subscribers: %d and %d", n, per[0], per[1])
}

func TestAPlainAMQPMessageIsReceivedAsSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("converted")
	sub := newSubscriber(t, b.config)
	msgs, err := sub.Subscribe(t.Context(), q)
	require.NoError(t, err)

	// What watermill-amqp's DefaultMarshaler would nack forever: no UUID header, integer and
	// boolean headers, and the x-death header of a dead-lettered message.
	require.NoError(t, b.channel(t, func(ch *amqp.Channel) error {
		return ch.PublishWithContext(t.Context(), "", q, false, false, amqp.Publishing{
			MessageId:   "plain-1",
			ContentType: "text/plain",
			Body:        []byte("hello"),
			Headers: amqp.Table{
				"attempt": int32(3),
				"urgent":  true,
				"x-death": []any{amqp.Table{"count": int64(1), "queue": "elsewhere", "reason": "expired"}},
				"label":   "ünïcödé",
			},
		})
	}))
	m := receive(t, msgs, 10*time.Second)
	require.Equal(t, "plain-1", m.UUID)
	require.Equal(t, "hello", string(m.Payload))
	require.Equal(t, message.Metadata{
		"attempt":                       "3",
		"urgent":                        "true",
		"label":                         "ünïcödé",
		amqpmarshal.PropertyContentType: "text/plain",
	}, m.Metadata)
}

func TestWrongCredentialsAreReportedWithoutThePassword(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	bad := strings.Replace(url, "guest:guest@", "guest:Wr0ngPassw0rd@", 1)
	require.NotEqual(t, url, bad, "the test URL has guest:guest credentials")
	_, err := amqptransport.NewPublisher(amqptransport.Config{URL: bad}, watermill.NopLogger{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "Wr0ngPassw0rd")
	require.Contains(t, err.Error(), "guest:xxxxx@", "the error says which broker")
	t.Logf("wrong password: %v", err)

	_, err = amqptransport.NewSubscriber(amqptransport.Config{URL: "amqp://u:Secr3tPass@127.0.0.1:1/", DialTimeout: 2 * time.Second}, watermill.NopLogger{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "Secr3tPass")
	require.Contains(t, err.Error(), "127.0.0.1:1")
	t.Logf("unreachable broker: %v", err)
}

// TestReconnectsAfterTheBrokerDropsTheConnections closes this test's connections from the
// broker's side (rabbitmqctl close_connection), as a broker restart does, without disturbing
// other tests on the same broker; the publisher and the subscription resume by themselves.
func TestReconnectsAfterTheBrokerDropsTheConnections(t *testing.T) {
	t.Parallel()
	for _, consumers := range []int{1, 4} { // one message at a time, and many
		t.Run(fmt.Sprintf("Consumers=%d", consumers), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctl := rabbitmqctl(t)
			q := b.queue("reconnect")
			pub := newPublisher(t, b.config)
			config := b.config
			config.Consumers = consumers
			sub := newSubscriber(t, config)
			msgs, err := sub.Subscribe(t.Context(), q)
			require.NoError(t, err)

			require.NoError(t, pub.Publish(q, message.NewMessage("before", nil)))
			before := take(t, msgs, 10*time.Second)
			require.Equal(t, "before", before.UUID)
			before.Ack()

			closed := closeConnections(t, ctl, b.name)
			require.Len(t, closed, 2, "the publisher's and the subscriber's connections")
			dropped := time.Now()

			// Publishing fails while the connection is down and works once watermill-amqp reconnected.
			var attempts int
			require.Eventually(t, func() bool {
				attempts++
				return pub.Publish(q, message.NewMessage("after", nil)) == nil
			}, 30*time.Second, 50*time.Millisecond)
			after := take(t, msgs, 30*time.Second)
			require.Equal(t, "after", after.UUID, "the subscription resumed")
			after.Ack()
			reopened := connections(t, ctl, b.name)
			require.Len(t, reopened, 2, "both reconnected")
			require.NotContains(t, reopened, closed[0])
			require.NotContains(t, reopened, closed[1])
			require.Eventually(t, func() bool { return b.count(t, q) == 0 }, 10*time.Second, 50*time.Millisecond,
				"the ack after the reconnection reached the broker")
			t.Logf("publishing worked again %s after the connections were dropped (%d attempts); subscription resumed",
				time.Since(dropped).Round(time.Millisecond), attempts)
		})
	}
}

type ctlCommand func(args ...string) ([]byte, error)

// rabbitmqctl returns a runner of the test node's rabbitmqctl, which scripts/services.sh writes.
func rabbitmqctl(t *testing.T) ctlCommand {
	t.Helper()
	path := os.Getenv("TIMEOUTMILL_RABBITMQCTL")
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("TIMEOUTMILL_RABBITMQCTL is not set although CI is: source the env file of scripts/services.sh")
		}
		t.Skip("TIMEOUTMILL_RABBITMQCTL is not set: source the env file of scripts/services.sh to run")
	}
	return func(args ...string) ([]byte, error) {
		return exec.Command(path, args...).CombinedOutput()
	}
}

// connections lists the pids of the broker's connections whose name starts with prefix, once
// there are two (connections register with the broker a moment after they open).
func connections(t *testing.T, ctl ctlCommand, prefix string) []string {
	t.Helper()
	var pids []string
	require.Eventually(t, func() bool {
		// One line per connection: the pid (<node.a.b.c>, which close_connection takes; the JSON
		// formatter prints another form it refuses), a tab, and the client properties in Erlang
		// terms: [{"connection_name","..."},...].
		out, err := ctl("-q", "list_connections", "--no-table-headers", "pid", "client_properties")
		require.NoError(t, err, "%s", out)
		pids = pids[:0]
		for _, line := range strings.Split(string(out), "\n") {
			pid, props, ok := strings.Cut(line, "\t")
			if ok && strings.Contains(props, `{"connection_name","`+prefix) {
				pids = append(pids, pid)
			}
		}
		return len(pids) >= 2
	}, 20*time.Second, 200*time.Millisecond)
	return pids
}

// closeConnections closes the broker's connections whose name starts with prefix, as a broker
// restart would, and returns their pids.
func closeConnections(t *testing.T, ctl ctlCommand, prefix string) []string {
	t.Helper()
	pids := connections(t, ctl, prefix)
	for _, pid := range pids {
		out, err := ctl("close_connection", pid, "timeoutmill test: simulated broker restart")
		require.NoError(t, err, "%s", out)
	}
	return pids
}

func TestManyConsumersHandleMessagesConcurrently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("many")
	config := b.config
	config.Consumers = 4
	sub := newSubscriber(t, config)
	msgs, err := sub.Subscribe(t.Context(), q)
	require.NoError(t, err)
	pub := newPublisher(t, b.config)
	const n = 40
	publishMany(t, pub, q, n, func(int) string { return watermill.NewUUID() })

	var (
		mu                sync.Mutex
		inFlight, maxSeen int
		seen              = map[string]int{}
		wg                sync.WaitGroup
	)
	for range n {
		m := <-msgs
		wg.Add(1)
		go func() { // as a router does: each message in a goroutine of its own
			defer wg.Done()
			mu.Lock()
			inFlight++
			maxSeen = max(maxSeen, inFlight)
			seen[m.UUID]++
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			inFlight--
			mu.Unlock()
			m.Ack()
		}()
	}
	wg.Wait()
	require.Len(t, seen, n)
	for id, c := range seen {
		require.Equal(t, 1, c, "message %s", id)
	}
	require.Greater(t, maxSeen, 1, "several messages handled at once")
	require.LessOrEqual(t, maxSeen, 4, "no more than Consumers at once: each waits for its ack")
	t.Logf("4 consumers: up to %d messages in flight", maxSeen)
}

func TestCloseWithUnreadMessagesReturnsThemToTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("many")
	pub := newPublisher(t, b.config)
	batch := publishMany(t, pub, q, 10, func(int) string { return watermill.NewUUID() })
	for _, consumers := range []int{1, 3} {
		config := b.config
		config.Consumers = consumers
		config.CloseTimeout = time.Second // how long the 3 consumers wait for the message taken
		sub, err := amqptransport.NewSubscriber(config, watermill.NopLogger{})
		require.NoError(t, err)
		msgs, err := sub.Subscribe(context.Background(), q)
		require.NoError(t, err)
		<-msgs // one taken and never acked, the others left unread
		closed := make(chan error)
		go func() { closed <- sub.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatalf("Close with %d consumer(s) and unread messages hangs", consumers)
		}
		for range msgs { // the channel closes
		}
		require.Eventually(t, func() bool { return b.count(t, q) == len(batch) }, 10*time.Second, 50*time.Millisecond,
			"every message back on the queue")
	}
}

// TestCloseDeliversTheAcksOfMessagesStillBeingHandled: with Consumers above 1, a handler that
// finishes while the Subscriber closes has its ack delivered, so its message is not delivered
// again; messages never handed out go back to the queue.
func TestCloseDeliversTheAcksOfMessagesStillBeingHandled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("graceful")
	pub := newPublisher(t, b.config)
	batch := publishMany(t, pub, q, 20, func(int) string { return watermill.NewUUID() })
	config := b.config
	config.Consumers = 4
	sub, err := amqptransport.NewSubscriber(config, watermill.NopLogger{})
	require.NoError(t, err)
	msgs, err := sub.Subscribe(context.Background(), q)
	require.NoError(t, err)
	var taken []*message.Message
	for range 4 {
		taken = append(taken, take(t, msgs, 10*time.Second))
	}
	closed := make(chan error)
	go func() { closed <- sub.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned with messages still being handled")
	case <-time.After(300 * time.Millisecond):
	}
	for _, m := range taken {
		m.Ack()
	}
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return once the messages handed out were acked")
	}
	for range msgs {
	}
	require.Eventually(t, func() bool { return b.count(t, q) == len(batch)-len(taken) }, 10*time.Second, 50*time.Millisecond,
		"the acked ones are gone, the rest are back on the queue")
}

// TestConsumingResumesAfterItsQueueIsDeleted: deleting a queue makes the broker cancel its
// consumers without closing their channels. The Consumers > 1 subscription notices, declares the
// queue again and consumes it, rather than waiting forever for a channel close.
func TestConsumingResumesAfterItsQueueIsDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("deleted")
	config := b.config
	config.Consumers = 4
	sub := newSubscriber(t, config)
	msgs, err := sub.Subscribe(t.Context(), q)
	require.NoError(t, err)
	pub := newPublisher(t, b.config)
	require.NoError(t, pub.Publish(q, message.NewMessage("before", nil)))
	require.Equal(t, "before", receive(t, msgs, 10*time.Second).UUID)

	require.NoError(t, b.channel(t, func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err }))
	// The publisher declared the queue on this connection already; the subscription declares it
	// again when it consumes again.
	require.Eventually(t, func() bool { return b.exists(t, q) }, 15*time.Second, 50*time.Millisecond, "the queue is declared again")
	require.NoError(t, b.channel(t, func(ch *amqp.Channel) error {
		return ch.PublishWithContext(t.Context(), "", q, true, false, amqp.Publishing{MessageId: "after", DeliveryMode: amqp.Persistent})
	}))
	require.Equal(t, "after", receive(t, msgs, 15*time.Second).UUID, "consuming resumed")
}

// TestNackedMessagesComeBackWhileOthersAreAcked mixes nacks and acks on one channel of the
// Consumers > 1 subscription: every nacked message is delivered again, every acked one leaves
// the queue, and the channel survives (a wrong multiple-ack would close it).
func TestNackedMessagesComeBackWhileOthersAreAcked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue("nack")
	pub := newPublisher(t, b.config)
	const n = 300
	publishMany(t, pub, q, n, func(i int) string { return fmt.Sprintf("m-%03d", i) })
	config := b.config
	config.Consumers = 32
	sub := newSubscriber(t, config)
	msgs, err := sub.Subscribe(t.Context(), q)
	require.NoError(t, err)

	nackFirst := func(id string) bool { return id[len(id)-1]%3 == 0 } // a third of them
	deliveries := map[string]int{}
	for acks := 0; acks < n; {
		m := take(t, msgs, 20*time.Second)
		deliveries[m.UUID]++
		nack := deliveries[m.UUID] == 1 && nackFirst(m.UUID)
		if !nack {
			acks++
		}
		delay := time.Duration(len(deliveries)%3) * time.Millisecond
		go func() { // as a router does, each in a goroutine of its own, finishing out of order
			time.Sleep(delay)
			if nack {
				m.Nack()
			} else {
				m.Ack()
			}
		}()
	}
	require.Eventually(t, func() bool { return b.count(t, q) == 0 }, 10*time.Second, 50*time.Millisecond, "every ack reached the broker")
	for id, c := range deliveries {
		if nackFirst(id) {
			require.Equal(t, 2, c, "nacked %s is delivered again, once", id)
		} else {
			require.Equal(t, 1, c, "acked %s is delivered once", id)
		}
	}
}

// TestAnnouncementsAreTransientOnlyWhenConfigured shows the delivery mode of what the Publisher
// sends: the poller's announcements of due ids are transient by default, persistent with
// PersistentAnnouncements; every other message is persistent either way, and an announcement
// still carries its id as payload.
func TestAnnouncementsAreTransientOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name      string
		transient bool
		want      uint8
	}{
		{"default", false, amqp.Persistent},
		{"TransientAnnouncements", true, amqp.Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := b.config
			config.TransientAnnouncements = tc.transient
			pub := newPublisher(t, config)
			announcer := announce.NewPublisher(pub, b.queue("E"), 0, 0)
			require.NoError(t, announcer.PublishDue(t.Context(), []string{"timeout-1"}, time.Time{}))
			d := b.get(t, announcer.Topic())
			require.Equal(t, tc.want, d.DeliveryMode, "announcement")
			require.Equal(t, "timeout-1", string(d.Body))

			require.NoError(t, pub.Publish(b.queue("a"), message.NewMessage(watermill.NewUUID(), []byte("due message"))))
			d = b.get(t, b.queue("a"))
			require.Equal(t, uint8(amqp.Persistent), d.DeliveryMode, "any other message")
		})
	}
}
