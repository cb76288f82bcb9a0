package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	// The pure Go SQLite driver, registered as "sqlite".
	_ "modernc.org/sqlite"

	"github.com/timeoutmill/timeoutmill/internal/amqpmarshal"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// Names of the ceiling rows, which the targets refer to.
const (
	ceilingRoundTrip       = "RabbitMQ round trip"
	ceilingDeadLetter      = "RabbitMQ dead-letter path (quorum)"
	ceilingDeadLetterClass = "RabbitMQ dead-letter path (classic)"
	ceilingDeadLetter2     = "RabbitMQ dead-letter path, 2 hops (quorum)"
	ceilingPostgres1       = "PostgreSQL commits (1 connection)"
	ceilingPostgres8       = "PostgreSQL commits (8 connections)"
	ceilingSQLite          = "SQLite commits (synchronous NORMAL)"
)

// Ceilings are the raw paths every result is read against.
func Ceilings() []Ceiling {
	return append([]Ceiling{
		{Name: ceilingRoundTrip, Needs: []string{"rabbitmq"}, Run: roundTrip},
		{Name: ceilingDeadLetter, Needs: []string{"rabbitmq"}, Run: deadLetterPath(true, 1)},
		{Name: ceilingDeadLetterClass, Needs: []string{"rabbitmq"}, Run: deadLetterPath(false, 1)},
		{Name: ceilingDeadLetter2, Needs: []string{"rabbitmq"}, Run: deadLetterPath(true, 2)},
		{Name: ceilingPostgres1, Needs: []string{"postgres"}, Run: postgresCommits(1)},
		{Name: ceilingPostgres8, Needs: []string{"postgres"}, Run: postgresCommits(8)},
		{Name: ceilingSQLite, Run: sqliteCommits},
		{Name: ceilingGoChannel, Run: goChannelRelay},
	}, streamCeilings()...)
}

// arrivals counts the messages of one ceiling as they arrive.
type arrivals struct {
	mu    sync.Mutex
	seen  map[string]bool
	dups  int
	first time.Time
	last  time.Time
	all   chan struct{}
	want  int
}

func countArrivals(msgs <-chan *message.Message, want int) *arrivals {
	a := &arrivals{seen: make(map[string]bool, want), all: make(chan struct{}), want: want}
	go func() {
		for msg := range msgs {
			at := time.Now()
			msg.Ack()
			a.mu.Lock()
			if a.seen[msg.UUID] {
				a.dups++
			} else {
				a.seen[msg.UUID] = true
				if a.first.IsZero() {
					a.first = at
				}
				a.last = at
				if len(a.seen) == a.want {
					close(a.all)
				}
			}
			a.mu.Unlock()
		}
	}()
	return a
}

// count is how many distinct messages arrived so far.
func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

func (a *arrivals) wait(ctx context.Context, d time.Duration) (unique, dups int, first, last time.Time) {
	select {
	case <-a.all:
		time.Sleep(linger)
	case <-time.After(d):
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen), a.dups, a.first, a.last
}

// roundTrip publishes persistent messages with confirms through amqptransport (8 goroutines,
// 100 messages a call) to a durable queue while a fast consumer takes them: one broker hop, the
// unit a delayed message pays three of in the emulated pipeline.
func roundTrip(ctx context.Context, env Env, plan Plan) (Result, error) {
	n := plan.CeilingMessages
	queue := "timeoutbench_rt_" + watermill.NewShortUUID()
	defer func() { _ = deleteQueues(env.AMQPURL, queue) }()
	pub, err := amqptransport.NewPublisher(amqptransport.Config{URL: env.AMQPURL, ConnectionName: "timeoutbench round trip"}, env.logger())
	if err != nil {
		return Result{}, err
	}
	defer pub.Close()
	if err := pub.DeclareQueues(ctx, queue); err != nil {
		return Result{}, err
	}
	msgs, closeReceiver, err := receiver(ctx, env.AMQPURL, queue)
	if err != nil {
		return Result{}, err
	}
	defer closeReceiver()
	got := countArrivals(msgs, n)

	batch := make([]*message.Message, n)
	for i := range batch {
		batch[i] = message.NewMessage(watermill.NewUUID(), plan.payload())
	}
	start := time.Now()
	failed, err := publishChunks(batch, 8, 100, func(ms []*message.Message) error { return pub.Publish(queue, ms...) })
	published := time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("%d messages not published: %w", failed, err)
	}
	unique, dups, _, last := got.wait(ctx, time.Minute)
	r := Result{
		System: ceilingRoundTrip, Kind: KindCeiling, Messages: n,
		PublishRate: float64(n) / published.Seconds(),
		Counted:     true, Lost: n - unique, Duplicated: dups,
		Notes: []string{"persistent, confirms, 8 publishers × 100 a call, 4 consumers; drain = round trip while publishing"},
	}
	if unique > 0 {
		r.DrainRate = float64(unique) / last.Sub(start).Seconds()
		r.Figures = map[string]float64{"drain": r.DrainRate}
	}
	return r, nil
}

// publishChunks publishes msgs in chunks from workers goroutines and returns how many failed.
func publishChunks[T any](msgs []T, workers, chunk int, publish func([]T) error) (int, error) {
	chunks := make(chan []T, len(msgs)/chunk+1)
	for i := 0; i < len(msgs); i += chunk {
		chunks <- msgs[i:min(len(msgs), i+chunk)]
	}
	close(chunks)
	var (
		wg       sync.WaitGroup
		failed   atomic.Int64
		mu       sync.Mutex
		firstErr error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range chunks {
				if err := publish(c); err != nil {
					failed.Add(int64(len(c)))
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return int(failed.Load()), firstErr
}

// deadLetterPath measures RabbitMQ's TTL and dead-letter mechanism alone: messages expiring at
// one instant in a queue that dead-letters them to the destination, the path every native
// delay level takes. quorum declares the holding queues as native/rabbitmq declares its levels
// (quorum, at-least-once dead-lettering); otherwise classic queues.
//
// With hops > 1 the messages cross that many holding queues, as a native delay crosses one level
// queue per set bit of its seconds: they expire from the first hops−1 seconds before the instant
// into a chain of queues with a fixed TTL of 1 s (native's level 0), the last of which
// dead-letters to the destination. Every dead-lettering here goes through the default exchange;
// native's also routes through its topic exchanges.
func deadLetterPath(quorum bool, hops int) func(ctx context.Context, env Env, plan Plan) (Result, error) {
	return func(ctx context.Context, env Env, plan Plan) (Result, error) {
		n := plan.CeilingMessages
		name := ceilingDeadLetterClass
		queueArgs := func() amqp.Table { return amqp.Table{"x-queue-type": "classic"} }
		if quorum {
			name = ceilingDeadLetter
			queueArgs = func() amqp.Table {
				return amqp.Table{"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
			}
		}
		if hops > 1 {
			name = ceilingDeadLetter2
			if hops != 2 || !quorum {
				return Result{}, fmt.Errorf("bench: no ceiling row for %d hops (quorum %v)", hops, quorum)
			}
		}
		id := watermill.NewShortUUID()
		dest := "timeoutbench_dl_" + id
		holds := make([]string, hops)
		for i := range holds {
			holds[i] = fmt.Sprintf("timeoutbench_hold_%s_%d", id, i)
		}
		defer func() { _ = deleteQueues(env.AMQPURL, append(holds, dest)...) }()

		conn, err := amqp.Dial(env.AMQPURL)
		if err != nil {
			return Result{}, fmt.Errorf("connecting: %w", err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return Result{}, err
		}
		if _, err := ch.QueueDeclare(dest, true, false, false, false, nil); err != nil {
			return Result{}, fmt.Errorf("declaring %s: %w", dest, err)
		}
		for i := hops - 1; i >= 0; i-- {
			args := queueArgs()
			args["x-dead-letter-exchange"] = ""
			args["x-dead-letter-routing-key"] = dest
			if i+1 < hops {
				args["x-dead-letter-routing-key"] = holds[i+1]
			}
			if i > 0 {
				args["x-message-ttl"] = int64(1000)
			}
			if _, err := ch.QueueDeclare(holds[i], true, false, false, false, args); err != nil {
				return Result{}, fmt.Errorf("declaring %s: %w", holds[i], err)
			}
		}
		_ = ch.Close()
		msgs, closeReceiver, err := receiver(ctx, env.AMQPURL, dest)
		if err != nil {
			return Result{}, err
		}
		defer closeReceiver()
		got := countArrivals(msgs, n)

		pubs := make([]amqp.Publishing, n)
		for i := range pubs {
			p, err := amqpmarshal.Marshaler{}.Marshal(message.NewMessage(watermill.NewUUID(), plan.payload()))
			if err != nil {
				return Result{}, err
			}
			p.DeliveryMode = amqp.Persistent
			pubs[i] = p
		}
		due := time.Now().Add(time.Duration(hops+1)*time.Second + time.Duration(float64(n)/2500*float64(time.Second)))
		expire := due.Add(-time.Duration(hops-1) * time.Second) // from the first holding queue
		start := time.Now()
		failed, err := publishChunks(pubs, 4, 100, func(ps []amqp.Publishing) error {
			return publishExpiring(ctx, conn, holds[0], ps, expire)
		})
		published := time.Since(start)
		if err != nil {
			return Result{}, fmt.Errorf("%d messages not published: %w", failed, err)
		}
		unique, dups, first, last := got.wait(ctx, time.Until(due)+time.Minute)
		r := Result{
			System: name, Kind: KindCeiling, Messages: n,
			PublishRate: float64(n) / published.Seconds(),
			Counted:     true, Lost: n - unique, Duplicated: dups,
			Notes: []string{"per-message TTL, all expiring at one instant; drain = messages ÷ (last arrival − expiry)"},
		}
		if hops > 1 {
			r.Notes = []string{fmt.Sprintf("%d dead-letterings a message, as a native delay of 3 or 5 s: all expiring at one instant into a queue with a TTL of 1 s; default exchange, no topic routing; drain = messages ÷ (last arrival − due)", hops)}
		}
		if start.Add(published).After(expire) {
			r.Notes = append(r.Notes, "published only after the expiry: drain includes publishing")
		}
		if unique > 0 && last.After(due) {
			r.DrainRate = float64(unique) / last.Sub(due).Seconds()
			r.Figures = map[string]float64{"drain": r.DrainRate}
			after := "expiry"
			if hops > 1 {
				after = "due"
			}
			r.Notes = append(r.Notes, fmt.Sprintf("first %s ms after %s", millis(first.Sub(due)), after))
		}
		return r, nil
	}
}

// publishExpiring publishes ps to queue on a channel of its own with confirms, each to expire
// at due.
func publishExpiring(ctx context.Context, conn *amqp.Connection, queue string, ps []amqp.Publishing, due time.Time) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := make([]*amqp.DeferredConfirmation, len(ps))
	for i, p := range ps {
		p.Expiration = strconv.FormatInt(max(0, time.Until(due).Milliseconds()), 10)
		if confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, p); err != nil {
			return err
		}
	}
	for _, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("message not confirmed")
		}
	}
	return nil
}

// postgresCommits measures single-row INSERT commits a second on conns connections at once.
func postgresCommits(conns int) func(ctx context.Context, env Env, plan Plan) (Result, error) {
	return func(ctx context.Context, env Env, plan Plan) (Result, error) {
		schema, err := newSchema(ctx, env.PostgresDSN)
		if err != nil {
			return Result{}, err
		}
		defer schema.drop()
		db, err := sql.Open("pgx", env.PostgresDSN)
		if err != nil {
			return Result{}, err
		}
		defer db.Close()
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		table := quote(schema.name) + ".commits"
		if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+` (id bigserial PRIMARY KEY, payload bytea NOT NULL)`); err != nil {
			return Result{}, err
		}
		n, d, err := commitLoop(ctx, conns, plan.CommitTime, func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, `INSERT INTO `+table+` (payload) VALUES ($1)`, plan.payload())
			return err
		})
		if err != nil {
			return Result{}, err
		}
		name := ceilingPostgres1
		if conns > 1 {
			name = ceilingPostgres8
		}
		return Result{
			System: name, Kind: KindCeiling, Messages: n, PublishRate: float64(n) / d.Seconds(),
			Figures: map[string]float64{"commits": float64(n) / d.Seconds()},
			Notes:   []string{"single-row INSERT, one commit each, synchronous_commit on; publish/s = commits/s"},
		}, nil
	}
}

// sqliteCommits measures single-row INSERT commits a second on one SQLite connection in WAL
// mode with synchronous NORMAL, the SQLite store's defaults.
func sqliteCommits(ctx context.Context, env Env, plan Plan) (Result, error) {
	path := filepath.Join(env.TempDir, "commits-"+watermill.NewShortUUID()+".db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE commits (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)`); err != nil {
		return Result{}, err
	}
	n, d, err := commitLoop(ctx, 1, plan.CommitTime, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, `INSERT INTO commits (payload) VALUES (?)`, plan.payload())
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return Result{
		System: ceilingSQLite, Kind: KindCeiling, Messages: n, PublishRate: float64(n) / d.Seconds(),
		Figures: map[string]float64{"commits": float64(n) / d.Seconds()},
		Notes:   []string{"single-row INSERT, one commit each, WAL; publish/s = commits/s"},
	}, nil
}

// commitLoop runs commit from workers goroutines for d and counts the calls.
func commitLoop(ctx context.Context, workers int, d time.Duration, commit func(ctx context.Context) error) (int, time.Duration, error) {
	var (
		wg       sync.WaitGroup
		n        atomic.Int64
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	stop := start.Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				if err := commit(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(n.Load()), time.Since(start), firstErr
}
