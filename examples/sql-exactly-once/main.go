// Command sql-exactly-once runs an endpoint's timeout manager with the SQL transport and the
// PostgreSQL store on one database, in exactly-once mode: each due message is written to its
// destination's table and its timeout deleted in one transaction.
//
// It schedules a few payment reminders with different delays, consumes the destination queue,
// and prints each delivery with how late it was; then it checks that each arrived exactly once
// and that the store is empty. It also shows exactly once refused where it cannot hold: the same
// transport with a store in another place. Everything lives in a schema of its own, dropped at
// the end.
//
//	source <(scripts/services.sh env)   # the PostgreSQL that `make test` starts
//	go run ./examples/sql-exactly-once -dsn "$TIMEOUTMILL_TEST_POSTGRES_DSN"
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

const (
	endpoint    = "billing"
	destination = "payment-reminders"
)

// reminders are the delayed messages the example sends: order and delay.
var reminders = []struct {
	order string
	delay time.Duration
}{
	{"order-17", 1500 * time.Millisecond},
	{"order-42", 500 * time.Millisecond},
	{"order-99", time.Second},
}

func main() {
	dsn := flag.String("dsn", os.Getenv("TIMEOUTMILL_TEST_POSTGRES_DSN"), "PostgreSQL DSN (defaults to $TIMEOUTMILL_TEST_POSTGRES_DSN)")
	flag.Parse()
	if *dsn == "" {
		log.Fatal("no database: pass -dsn postgres://... or source <(scripts/services.sh env)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, *dsn); err != nil {
		log.Fatal(err)
	}
}

// printer writes lines stamped with the time since start, from any goroutine.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%5.2fs  "+format+"\n", append([]any{time.Since(p.start).Seconds()}, args...)...)
}

func run(ctx context.Context, out io.Writer, dsn string) (err error) {
	p := &printer{out: out, start: time.Now()}
	logger := watermill.NopLogger{}

	schema, drop, err := ownSchema(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, drop()) }()
	p.printf("schema %s: the store's table and the queue tables live here", schema)

	store, err := postgres.Open(ctx, postgres.Config{DSN: dsn, Schema: schema, Endpoint: endpoint})
	if err != nil {
		return err
	}
	defer store.Close()
	pub, sub, err := sqltransport.New(ctx, sqltransport.Config{Dialect: sqltransport.PostgreSQL, DSN: dsn, Schema: schema}, logger)
	if err != nil {
		return err
	}
	defer pub.Close()
	defer sub.Close()

	// Exactly once needs the store and the transport in one transaction: refused elsewhere.
	if _, err := sqltransport.NewExactlyOnceForwarder(ctx, pub, memory.New(), logger); err != nil {
		p.printf("refused, as it should be: %v", err)
	} else {
		return errors.New("exactly once was accepted with an in-memory store")
	}
	forwarder, err := sqltransport.NewExactlyOnceForwarder(ctx, pub, store, logger)
	if err != nil {
		return err
	}
	p.printf("exactly once: the transport and the store share one PostgreSQL database")

	manager, err := timeouts.NewManager(timeouts.Config{
		Endpoint: endpoint, Store: store, Publisher: pub, Subscriber: sub, Forwarder: forwarder,
	}, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		return err
	}
	if err := manager.AddToRouter(router); err != nil {
		return err
	}

	due := map[string]time.Time{}
	deliveries := map[string]int{}
	var mu sync.Mutex
	arrived := make(chan struct{}, 1) // a delivery came
	router.AddConsumerHandler("remind", destination, sub, func(msg *message.Message) error {
		now := time.Now()
		mu.Lock()
		deliveries[msg.UUID]++
		n, at := deliveries[msg.UUID], due[msg.UUID]
		mu.Unlock()
		p.printf("delivered %s (%s) %s after it was due, delivery #%d", msg.UUID, msg.Payload, now.Sub(at).Round(time.Millisecond), n)
		select {
		case arrived <- struct{}{}:
		default:
		}
		return nil
	})

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan error, 1)
	go func() { stopped <- router.Run(runCtx) }()
	select {
	case <-router.Running():
	case err := <-stopped:
		return fmt.Errorf("router: %w", err)
	}

	for _, r := range reminders {
		msg := message.NewMessage(watermill.NewUUID(), []byte("remind about "+r.order))
		at := time.Now().Add(r.delay)
		timeouts.DeliverAt(msg, at)
		mu.Lock()
		due[msg.UUID] = at
		mu.Unlock()
		if err := manager.Publisher().Publish(destination, msg); err != nil {
			return err
		}
		p.printf("scheduled %s for %s in %s", msg.UUID, r.order, r.delay)
	}

	// Wait for every reminder, counting messages (by UUID), not deliveries.
	for {
		mu.Lock()
		distinct := len(deliveries)
		mu.Unlock()
		if distinct == len(reminders) {
			break
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the reminders: %d of %d arrived: %w", distinct, len(reminders), ctx.Err())
		}
	}
	// A duplicate would come now, if at all; the check below counts it.
	time.Sleep(time.Second)
	stop()
	if err := <-stopped; err != nil {
		return fmt.Errorf("router: %w", err)
	}
	<-manager.Done() // the manager finished or released its work in flight, before the deferred Closes
	if err := manager.Err(); err != nil {
		return err
	}

	mu.Lock()
	defer mu.Unlock()
	for id, n := range deliveries {
		if n != 1 {
			return fmt.Errorf("%s was delivered %d times", id, n)
		}
	}
	if len(deliveries) != len(reminders) {
		return fmt.Errorf("%d of %d reminders delivered", len(deliveries), len(reminders))
	}
	st, err := store.Stats(ctx, time.Now())
	if err != nil {
		return err
	}
	p.printf("each of the %d reminders delivered exactly once; %d timeouts left in the store", len(reminders), st.Pending)
	if st.Pending != 0 {
		return fmt.Errorf("%d timeouts left in the store", st.Pending)
	}
	return nil
}

// ownSchema creates a schema of the run's own in dsn's database and returns a function that
// drops it with everything in it.
func ownSchema(ctx context.Context, dsn string) (string, func() error, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return "", nil, err
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, errors.Join(err, db.Close())
	}
	schema := "sql_exactly_once_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, errors.Join(fmt.Errorf("creating schema %s: %w", schema, err), db.Close())
	}
	return schema, func() error {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, err := db.ExecContext(dropCtx, "DROP SCHEMA "+schema+" CASCADE")
		return errors.Join(err, db.Close())
	}, nil
}
