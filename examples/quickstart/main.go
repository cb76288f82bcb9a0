// Command quickstart shows timeoutmill with no server at all: Watermill's in-process GoChannel
// and the embedded SQLite store in a temporary directory.
//
// It schedules a handful of messages with delays between 0.5 s and 5 s and prints each as it is
// delivered, with how late it was. Then it stops, as a process would, and starts again on the
// same file: the timeouts scheduled before the stop are still delivered.
//
// Delivery is at least once: a reminder delivered just as the first run stops may come again
// after the restart, because the stop cut short the removal of its timeout. So the program
// counts messages by UUID, not deliveries, prints a second delivery as one ("reminder 4 again
// (at least once)"), and says that all arrived only once every one of them has.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

const (
	endpoint = "quickstart"
	topic    = "reminders"
	// dueHeader is the example's own record of when it asked for delivery, to print lateness.
	dueHeader = "quickstart.due"
)

// plan is what a run does: the delays of the reminders it schedules, and how many of them the
// first run receives before it stops.
type plan struct {
	delays    []time.Duration
	stopAfter int
}

// quickStart stops when the first four reminders have arrived: the fourth is due at 2 s, so the
// stop lands on a due time.
var quickStart = plan{
	delays:    []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second, 4 * time.Second, 5 * time.Second},
	stopAfter: 4,
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := quickStart.run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func (p plan) run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "timeoutmill-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dbPath := filepath.Join(dir, "timeouts.db")
	fmt.Fprintf(out, "store: %s\n", dbPath)
	got := newReceived(out)

	// First run: schedule everything, see the early ones delivered, then stop.
	first, err := startEndpoint(ctx, dbPath, got)
	if err != nil {
		return err
	}
	start := time.Now()
	for i, d := range p.delays {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("reminder %d", i+1)))
		due := time.Now().Add(d)
		msg.Metadata.Set(dueHeader, due.Format(time.RFC3339Nano))
		timeouts.DeliverAt(msg, due)
		if err := first.manager.Publisher().Publish(topic, msg); err != nil {
			return errors.Join(err, first.stop())
		}
		fmt.Fprintf(out, "scheduled %q in %s\n", msg.Payload, d)
	}
	if err := got.await(ctx, p.stopAfter); err != nil {
		return errors.Join(err, first.stop())
	}
	if err := first.stop(); err != nil {
		return err
	}
	fmt.Fprintf(out, "stopped after %.1f s: %d of %d reminders received, %d timeouts still in the store\n",
		time.Since(start).Seconds(), got.messages(), len(p.delays), first.pending)

	// Second run, on the same file: the pending timeouts survive the restart.
	second, err := startEndpoint(ctx, dbPath, got)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "restarted on the same store")
	if err := got.await(ctx, len(p.delays)); err != nil {
		return errors.Join(err, second.stop())
	}
	took := time.Since(start)
	if err := second.stop(); err != nil {
		return err
	}
	fmt.Fprintf(out, "all %d reminders delivered, none early, in %.1f s", got.messages(), took.Seconds())
	if n := got.duplicates(); n > 0 {
		fmt.Fprintf(out, "; %d delivered again (at least once)", n)
	}
	fmt.Fprintln(out)
	return nil
}

// received counts messages, not deliveries, by UUID, and prints each delivery as it comes.
type received struct {
	mu      sync.Mutex
	out     io.Writer
	seen    map[string]bool
	again   int
	err     error         // an early delivery, or one without its due time
	changed chan struct{} // a new message or an error
}

func newReceived(out io.Writer) *received {
	return &received{out: out, seen: map[string]bool{}, changed: make(chan struct{}, 1)}
}

// consume records every delivery until the subscription closes. An endpoint that is stopping
// still acks what it is given, so that no delivery is left half done.
func (r *received) consume(deliveries <-chan *message.Message) {
	for msg := range deliveries {
		r.record(msg)
		msg.Ack()
	}
}

func (r *received) record(msg *message.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}()
	due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(dueHeader))
	if err != nil {
		r.err = errors.Join(r.err, fmt.Errorf("delivered message without its due time: %w", err))
		return
	}
	late := time.Since(due)
	switch {
	case late < 0:
		r.err = errors.Join(r.err, fmt.Errorf("%q delivered %s early", msg.Payload, -late))
	case r.seen[msg.UUID]:
		r.again++
		fmt.Fprintf(r.out, "%q again (at least once), %d ms after due\n", msg.Payload, late.Milliseconds())
	default:
		r.seen[msg.UUID] = true
		fmt.Fprintf(r.out, "delivered %q, %d ms after due\n", msg.Payload, late.Milliseconds())
	}
}

// await returns once n distinct messages have arrived.
func (r *received) await(ctx context.Context, n int) error {
	for {
		r.mu.Lock()
		err, count := r.err, len(r.seen)
		r.mu.Unlock()
		if err != nil || count >= n {
			return err
		}
		select {
		case <-r.changed:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d reminders received: %w", count, n, ctx.Err())
		}
	}
}

func (r *received) messages() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *received) duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.again
}

// runningEndpoint is one "process": a store, a Pub/Sub, a router running the timeout manager,
// and a subscription to the destination topic.
type runningEndpoint struct {
	store      *sqlite.Store
	pubSub     *gochannel.GoChannel
	router     *message.Router
	manager    *timeouts.Manager
	routerDone chan error
	consumed   chan struct{}
	got        *received
	pending    int // timeouts left in the store at the stop
}

func startEndpoint(ctx context.Context, dbPath string, got *received) (*runningEndpoint, error) {
	store, err := sqlite.Open(ctx, sqlite.Config{Path: dbPath, Endpoint: endpoint})
	if err != nil {
		return nil, err
	}
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64, BlockPublishUntilSubscriberAck: true}, logger)
	fail := func(err error) (*runningEndpoint, error) {
		return nil, errors.Join(err, pubSub.Close(), store.Close())
	}
	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint:   endpoint,
		Store:      store,
		Publisher:  pubSub,
		Subscriber: pubSub,
	}, logger)
	if err != nil {
		return fail(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return fail(err)
	}
	if err := manager.AddToRouter(router); err != nil {
		return fail(err)
	}
	deliveries, err := pubSub.Subscribe(context.WithoutCancel(ctx), topic) // open until the Pub/Sub closes
	if err != nil {
		return fail(err)
	}
	e := &runningEndpoint{store: store, pubSub: pubSub, router: router, manager: manager,
		routerDone: make(chan error, 1), consumed: make(chan struct{}), got: got}
	go func() { defer close(e.consumed); got.consume(deliveries) }()
	go func() { e.routerDone <- router.Run(ctx) }()
	<-router.Running()
	return e, nil
}

// stop stops the endpoint as a process would, and counts the timeouts it leaves in the store.
func (e *runningEndpoint) stop() error {
	err := e.router.Close()
	err = errors.Join(err, <-e.routerDone)
	<-e.manager.Done() // what the stop cut short is back in the store, claimable at once
	st, statsErr := e.store.Stats(context.Background(), time.Now())
	e.pending = st.Pending
	err = errors.Join(err, statsErr, e.store.Close(), e.pubSub.Close())
	<-e.consumed // the Pub/Sub's close ends the subscription
	e.got.mu.Lock()
	defer e.got.mu.Unlock()
	return errors.Join(err, e.got.err)
}
