package acceptance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The fault suite's producer and consumer are plain AMQP 0-9-1 clients (amqp091, no Watermill)
// that reconnect by themselves: what they count does not depend on the code under test, and a
// broker restart does not stop them. (Watermill-amqp's own reconnection also trips the race
// detector, see reconnect_test.go; these run under -race.)

// skipFaultShort skips the fault suite under -short: it starts processes and servers.
func skipFaultShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("fault suite: starts timeoutmill processes and servers; skipped with -short")
	}
}

// brokerClient is a connection to a broker that is redialled whenever it is found closed. Its url
// may list the nodes of a cluster, separated by commas: it dials the first that answers.
type brokerClient struct {
	url string
	// queueArgs are the arguments of the queues it declares to consume (nil: classic).
	queueArgs amqp.Table

	mu     sync.Mutex
	conn   *amqp.Connection
	closed bool
}

func newBrokerClient(t *testing.T, url string) *brokerClient {
	t.Helper()
	c := &brokerClient{url: url}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.closed = true
		if c.conn != nil {
			_ = c.conn.Close()
		}
	})
	return c
}

// connection returns the open connection, dialling a new one if needed.
func (c *brokerClient) connection() (*amqp.Connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("client closed")
	}
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	var errs []error
	for _, u := range strings.Split(c.url, ",") {
		conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Heartbeat: 5 * time.Second})
		if err == nil {
			c.conn = conn
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// timeoutMsg is a delayed message as any AMQP producer sends it to an endpoint's Timeouts queue.
type timeoutMsg struct {
	id          string
	due         time.Time
	destination string
	body        []byte
}

func (m timeoutMsg) publishing() amqp.Publishing {
	return amqp.Publishing{
		MessageId:    m.id,
		DeliveryMode: amqp.Persistent,
		Body:         m.body,
		Headers: amqp.Table{
			wire.HeaderExpire:      wireparse.FormatExpire(m.due),
			wire.HeaderDestination: m.destination,
		},
	}
}

// newTimeouts makes count timeouts for destination, due evenly from first over spread.
func newTimeouts(count int, destination string, first time.Time, spread time.Duration) []timeoutMsg {
	msgs := make([]timeoutMsg, count)
	for i := range msgs {
		due := first
		if count > 1 {
			due = first.Add(time.Duration(int64(spread) * int64(i) / int64(count-1)))
		}
		msgs[i] = timeoutMsg{id: watermill.NewUUID(), due: due, destination: destination, body: fmt.Appendf(nil, "timeout %d", i)}
	}
	return msgs
}

func ids(msgs []timeoutMsg) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.id
	}
	return out
}

// send publishes msgs to queue with publisher confirms, in windows of 200, until each is
// confirmed: a window that fails (the broker went away) is sent again on a new connection, so a
// message may reach the queue twice, which the store satellite absorbs (idempotent by id).
// It returns how many windows had to be sent again.
func (c *brokerClient) send(ctx context.Context, queue string, msgs []timeoutMsg) (resent int, err error) {
	const window = 200
	for start := 0; start < len(msgs); {
		end := min(start+window, len(msgs))
		if err := c.sendWindow(ctx, queue, msgs[start:end]); err != nil {
			if ctx.Err() != nil {
				return resent, fmt.Errorf("sending timeouts %d..%d: %w (last error: %w)", start, end, ctx.Err(), err)
			}
			resent++
			time.Sleep(250 * time.Millisecond)
			continue
		}
		start = end
	}
	return resent, nil
}

func (c *brokerClient) sendWindow(ctx context.Context, queue string, msgs []timeoutMsg) error {
	conn, err := c.connection()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, m.publishing())
		if err != nil {
			return err
		}
		confirms = append(confirms, dc)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, dc := range confirms {
		ok, err := dc.WaitContext(wait)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("nacked by the broker")
		}
	}
	return nil
}

// sendPaced sends msgs in slices every interval (a steady load rather than one burst) and
// reports the result on the returned channel.
func (c *brokerClient) sendPaced(ctx context.Context, queue string, msgs []timeoutMsg, perTick int, interval time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		resent := 0
		for start := 0; start < len(msgs); start += perTick {
			end := min(start+perTick, len(msgs))
			n, err := c.send(ctx, queue, msgs[start:end])
			resent += n
			if err != nil {
				done <- err
				return
			}
			select {
			case <-ctx.Done():
				done <- ctx.Err()
				return
			case <-time.After(interval):
			}
		}
		done <- nil
	}()
	return done
}

// tally consumes a queue and counts what arrives, by AMQP message-id (the timeout's id: the
// dispatcher forwards the message with its UUID as message-id). A delivery that the broker marks
// redelivered, of an id already counted, is the consumer's own redelivery (its connection went
// before the ack reached the broker), not a second message, and is not counted twice.
type tally struct {
	queue string

	mu     sync.Mutex
	counts map[string]int
	first  map[string]time.Time
	last   time.Time
	total  int
	kept   map[string]amqp.Delivery // first delivery of each id, only when keeping
	keep   bool

	cancel context.CancelFunc
	done   chan struct{}
}

// consume starts counting what arrives on queue (declared durable, as the service declares
// destinations) until the test ends.
func (c *brokerClient) consume(t *testing.T, queue string) *tally {
	t.Helper()
	return c.consumeKeeping(t, queue, false)
}

func (c *brokerClient) consumeKeeping(t *testing.T, queue string, keepBodies bool) *tally {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tl := &tally{queue: queue, counts: map[string]int{}, first: map[string]time.Time{}, kept: map[string]amqp.Delivery{},
		keep: keepBodies, cancel: cancel, done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		defer close(tl.done)
		tl.run(ctx, c, ready)
	}()
	select {
	case err := <-ready:
		require.NoError(t, err, "consuming %s", queue)
	case <-time.After(30 * time.Second):
		t.Fatalf("could not start consuming %s", queue)
	}
	t.Cleanup(func() {
		cancel()
		<-tl.done
	})
	return tl
}

// run consumes until ctx ends, reconnecting after every loss; the first outcome goes to ready.
func (tl *tally) run(ctx context.Context, c *brokerClient, ready chan<- error) {
	first := true
	for ctx.Err() == nil {
		err := tl.consumeOnce(ctx, c, func() {
			if first {
				first = false
				ready <- nil
			}
		})
		if first && err != nil && ctx.Err() == nil {
			first = false
			ready <- err
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (tl *tally) consumeOnce(ctx context.Context, c *brokerClient, started func()) error {
	conn, err := c.connection()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(256, 0, false); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(tl.queue, true, false, false, false, c.queueArgs); err != nil {
		return err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, tl.queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	started()
	for d := range deliveries {
		tl.record(d)
		_ = d.Ack(false)
	}
	return nil
}

func (tl *tally) record(d amqp.Delivery) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	id := d.MessageId
	if uuid, ok := d.Headers["_watermill_message_uuid"].(string); ok && uuid != "" {
		id = uuid // the same as the message-id, except where that could not hold it (over 255 bytes)
	}
	if d.Redelivered && tl.counts[id] > 0 {
		return
	}
	now := time.Now()
	tl.total++
	tl.counts[id]++
	if tl.counts[id] == 1 {
		tl.first[id] = now
		if tl.keep {
			tl.kept[id] = d
		}
	}
	tl.last = now
}

// distinct is how many different ids arrived.
func (tl *tally) distinct() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.counts)
}

// waitDistinct waits up to within for n different ids; it reports whether they came.
func (tl *tally) waitDistinct(n int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for tl.distinct() < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// quiet waits until nothing arrived for the period (at most within), for late duplicates.
func (tl *tally) quiet(period, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		tl.mu.Lock()
		last := tl.last
		tl.mu.Unlock()
		if time.Since(last) >= period {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// figures compares what arrived with the ids sent: how many of them arrived, how many never
// did, how many arrived more than once (counting each extra arrival), and ids nobody sent.
type figures struct {
	sent, delivered, lost, duplicated, unknown int
	lostIDs, duplicatedIDs                     []string
}

func (tl *tally) figures(sent []string) figures {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	f := figures{sent: len(sent)}
	want := make(map[string]bool, len(sent))
	for _, id := range sent {
		want[id] = true
		switch n := tl.counts[id]; {
		case n == 0:
			f.lost++
			f.lostIDs = append(f.lostIDs, id)
		default:
			f.delivered++
			if n > 1 {
				f.duplicated += n - 1
				f.duplicatedIDs = append(f.duplicatedIDs, id)
			}
		}
	}
	for id := range tl.counts {
		if !want[id] {
			f.unknown++
		}
	}
	sort.Strings(f.lostIDs)
	sort.Strings(f.duplicatedIDs)
	return f
}

func (f figures) String() string {
	return fmt.Sprintf("sent=%d delivered=%d lost=%d duplicated=%d", f.sent, f.delivered, f.lost, f.duplicated)
}

// delivery is the first delivery of id, when the tally keeps them.
func (tl *tally) delivery(id string) (amqp.Delivery, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	d, ok := tl.kept[id]
	return d, ok
}

// firstArrival is when id first arrived (zero if it did not).
func (tl *tally) firstArrival(id string) time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.first[id]
}

// requireNoneLost fails t with the first lost ids, if any.
func requireNoneLost(t *testing.T, f figures) {
	t.Helper()
	if f.lost > 0 {
		shown := f.lostIDs
		if len(shown) > 10 {
			shown = shown[:10]
		}
		t.Fatalf("%d of %d timeouts lost (%s); first lost ids: %s", f.lost, f.sent, f, strings.Join(shown, ", "))
	}
	require.Zero(t, f.unknown, "messages nobody sent arrived")
}

// queueDepth is how many messages are ready in queue on the broker at url (0 when it does not
// exist, -1 when the broker cannot be asked).
func (c *brokerClient) queueDepth(queue string) int {
	conn, err := c.connection()
	if err != nil {
		return -1
	}
	ch, err := conn.Channel()
	if err != nil {
		return -1
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return 0
	}
	if err != nil {
		return -1
	}
	return q.Messages
}

// storedTimeouts counts the rows of endpoint's table in the PostgreSQL database at dsn (-1 when
// it cannot be asked, as while the server is down).
func storedTimeouts(dsn, endpoint string) int {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return -1
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	table := `public."` + strings.ReplaceAll(endpoint+".timeouts", `"`, `""`) + `"`
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		return -1
	}
	return n
}

// storedIDs are the ids in endpoint's table in the PostgreSQL database at dsn.
func storedIDs(t *testing.T, dsn, endpoint string) map[string]bool {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	table := `public."` + strings.ReplaceAll(endpoint+".timeouts", `"`, `""`) + `"`
	rows, err := db.QueryContext(context.Background(), "SELECT id FROM "+table)
	require.NoError(t, err)
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids[id] = true
	}
	require.NoError(t, rows.Err())
	return ids
}

// waitDrained waits up to within until the endpoint's table is empty and its dispatcher queue
// too: every stored timeout was forwarded and removed, so no duplicate can still come from it.
func waitDrained(t *testing.T, c *brokerClient, dsn, endpoint string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		stored := storedTimeouts(dsn, endpoint)
		queued := c.queueDepth(wire.DispatcherQueue(endpoint))
		if stored == 0 && queued == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the store still holds %d timeouts and the dispatcher queue %d messages", within, stored, queued)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// faultLog logs a case's figures in one line, so a CI log shows them together.
func faultLog(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURES %s: "+format, append([]any{t.Name()}, args...)...)
}

// longFaultCases reports whether the slowest cases run: under CI, or when
// TIMEOUTMILL_FAULT_LONG is set.
func longFaultCases() bool {
	return os.Getenv("CI") != "" || os.Getenv("TIMEOUTMILL_FAULT_LONG") != ""
}

// lateness is how late the last of msgs arrived after its due time, and how many arrived more
// than bound after theirs.
func (tl *tally) lateness(msgs []timeoutMsg, bound time.Duration) (worst time.Duration, beyond int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, m := range msgs {
		at, ok := tl.first[m.id]
		if !ok {
			continue
		}
		late := at.Sub(m.due)
		worst = max(worst, late)
		if late > bound {
			beyond++
		}
	}
	return worst, beyond
}
