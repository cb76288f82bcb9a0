package acceptance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The failover cases run a PostgreSQL primary and a streaming standby of the test's own, started
// by `scripts/services.sh pg-replica up` on a private state directory and free ports, and stopped
// when the test ends. Every client is given the multi-host DSN (both hosts,
// target_session_attrs=read-write), as it would be given a managed service's. The failover is
// what Patroni or a managed service does: the primary dies (every one of its processes killed -9
// at once, as a crashed host), and the standby is promoted with pg_ctl promote.

// resumeBound is the product's promise after a failover: deliveries resume within it of the
// promotion.
const resumeBound = 5 * time.Second

// pgPair is a private primary and standby.
type pgPair struct {
	dir  string
	port int // the primary's; the standby listens on port+1
}

// newPGPair starts a pair in mode ("sync" or "async") and stops it when t ends.
func newPGPair(t *testing.T, mode string) *pgPair {
	t.Helper()
	newPrivateServers(t) // skips (or fails under CI) where private servers cannot run
	p := &pgPair{dir: "/tmp/timeoutmill-pgpair-" + randomHex(t, 4), port: freePorts(t, 2, 0)}
	t.Cleanup(func() {
		if out, err := p.script("down"); err != nil {
			t.Logf("stopping the pair: %v\n%s", err, out)
		}
		_ = os.RemoveAll(p.dir)
	})
	start := time.Now()
	out, err := p.script("up", mode)
	require.NoError(t, err, "services.sh pg-replica up %s:\n%s", mode, out)
	t.Logf("primary on %d, %s standby on %d, up in %s", p.port, mode, p.port+1, time.Since(start).Round(time.Millisecond))
	return p
}

func (p *pgPair) script(args ...string) ([]byte, error) {
	cmd := exec.Command("../scripts/services.sh", append([]string{"pg-replica"}, args...)...)
	cmd.Env = append(os.Environ(), "TIMEOUTMILL_SERVICES_DIR="+p.dir, "TIMEOUTMILL_PG_REPLICA_PORT="+strconv.Itoa(p.port))
	return cmd.CombinedOutput()
}

// dsn lists both hosts: each connection goes to the one that is the primary.
func (p *pgPair) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/timeoutmill?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		p.port, p.port+1)
}

// standbyDSN is the standby's alone.
func (p *pgPair) standbyDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/timeoutmill?sslmode=disable&connect_timeout=5", p.port+1)
}

// killPrimary kills every process of the primary at once (stopped first, then killed), as a
// crashed host would lose them, and returns when it stopped them: nothing was answered after.
func (p *pgPair) killPrimary(t *testing.T) time.Time {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(p.dir, "pg-replica", "primary", "data", "postmaster.pid"))
	require.NoError(t, err)
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	require.NoError(t, err)
	pids := append([]int{postmaster}, childrenOf(postmaster)...)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	at := time.Now() // every process stopped: nothing commits or answers from here on
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	t.Logf("killed the primary's %d processes (postmaster %d)", len(pids), postmaster)
	return at
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its last ')'.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// promote promotes the standby and returns when the promotion was complete.
func (p *pgPair) promote(t *testing.T) time.Time {
	t.Helper()
	out, err := p.script("promote")
	require.NoError(t, err, "services.sh pg-replica promote:\n%s", out)
	return time.Now()
}

// acked records what a producer was told is durable (a publish, Schedule or commit that
// returned without an error), with its due time.
type acked struct {
	mu  sync.Mutex
	due map[string]time.Time
	at  map[string]time.Time // when the producer was told
	// resent are the ids sent again after an attempt failed without saying whether it went
	// through: a producer's resend may store a timeout again after its first copy was delivered.
	resent map[string]bool
	// queued are the ids published to the Timeouts queue (not Schedule or ScheduleTx), with
	// when their first attempt began: one acknowledged without an error was in the queue from
	// that attempt on, which may be before the kill though the producer heard of it after.
	queued map[string]time.Time
}

func newAcked() *acked {
	return &acked{due: map[string]time.Time{}, at: map[string]time.Time{}, resent: map[string]bool{}, queued: map[string]time.Time{}}
}

func (a *acked) add(id string, due time.Time, resent bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.due[id] = due
	a.at[id] = time.Now()
	if resent {
		a.resent[id] = true
	}
}

func (a *acked) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.due)
}

// failoverCounts are a drill's deliveries as the destination's table has them.
type failoverCounts struct {
	rows, distinct int
	earliest       map[string]time.Time // each id's first delivery (its row's created_at)
	copies         map[string]int
}

// destRows reads the destination table of the exactly-once SQL transport: every row is one
// delivery, created_at when the forward's transaction began.
func destRows(ctx context.Context, db *sql.DB, dest string) (failoverCounts, error) {
	c := failoverCounts{earliest: map[string]time.Time{}, copies: map[string]int{}}
	rows, err := db.QueryContext(ctx, `SELECT uuid, created_at FROM "watermill_`+dest+`"`)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id string
			at time.Time
		)
		if err := rows.Scan(&id, &at); err != nil {
			return c, err
		}
		c.rows++
		c.copies[id]++
		if first, ok := c.earliest[id]; !ok || at.Before(first) {
			c.earliest[id] = at
		}
	}
	c.distinct = len(c.earliest)
	return c, rows.Err()
}

// retryAcked calls do until it succeeds, the drill's producers' way through a failover: what
// they were not told is durable they send again, under the same id.
func retryAcked(ctx context.Context, do func(context.Context) error) (errs int, err error) {
	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := do(callCtx)
		cancel()
		if err == nil {
			return errs, nil
		}
		errs++
		if ctx.Err() != nil {
			return errs, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// advisoryHolds counts the session advisory locks (one bigint key: objsubid 1) granted on the
// server db reaches: the instance names held there.
func advisoryHolds(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted`).Scan(&n)
	return n, err
}

// TestFaultPostgresFailover is the managed-PostgreSQL maintenance case: `timeoutmill run
// --exactly-once` (SQL transport and store on one database) with an --instance, and an
// in-process manager with Config.Instance whose Schedule and ScheduleTx callers keep scheduling,
// all on the multi-host DSN of a primary and a synchronous standby. Under load the primary is
// killed -9 and the standby promoted. Every timeout a producer was told is durable arrives, none
// early, none twice; deliveries resume within resumeBound of the promotion; both instance names
// are held again on the new primary (a twin is refused); no critical error.
func TestFaultPostgresFailover(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	pair := newPGPair(t, "sync")
	dsn := pair.dsn()
	tag := randomHex(t, 4)
	endpoint := "fo-" + tag
	dest := endpoint + ".due"
	svcInstance, libInstance := "fo-svc-"+tag, "fo-lib-"+tag

	// The standby alone refuses to hold a name: a lock there would be the standby's own.
	standbyStore, err := postgres.Open(t.Context(), postgres.Config{DSN: pair.standbyDSN(), Endpoint: endpoint})
	require.NoError(t, err)
	_, err = standbyStore.HoldInstance(t.Context(), "fo-standby-"+tag)
	require.ErrorContains(t, err, "standby", "no name held on a standby")
	require.NoError(t, standbyStore.Close())

	svc := startService(t, "failover-svc", runArgs(endpoint, dsn, dsn, endpoint+".error",
		"--exactly-once", "--close-timeout", "10s", "--instance", svcInstance)...)

	e := &sqlEnv{sqlBackend: sqlBackend{name: "postgres-failover", dialect: sqltransport.PostgreSQL, exactlyOnce: true},
		dsn: dsn, endpoint: endpoint, errorQueue: endpoint + ".error"}
	app, err := sql.Open("pgx", dsn) // the application's own pool: its orders and ScheduleTx
	require.NoError(t, err)
	t.Cleanup(func() { _ = app.Close() })
	e.db = app
	store := e.store(t)
	n := startSQLNode(t, e, store, func(c *timeouts.Config) { c.Instance = libInstance })
	<-n.manager.Ready()
	_, err = app.ExecContext(t.Context(), `CREATE TABLE orders_`+tag+` (id text PRIMARY KEY)`)
	require.NoError(t, err)

	pub, err := sqltransport.NewPublisher(context.Background(), sqltransport.Config{Dialect: sqltransport.PostgreSQL, DSN: dsn}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	checker, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = checker.Close() })

	// The load: a publisher to the Timeouts queue (batches of 20 every 100 ms), two Schedule
	// callers and one ScheduleTx caller, each timeout due 1 to 4 s after it is sent, until
	// stop; each retries what failed under the same id until it is told it is durable.
	got := newAcked()
	var producerErrs atomic.Int64
	loadCtx, stop := context.WithCancel(context.Background())
	defer stop()
	var producers sync.WaitGroup
	dueSoon := func(i int) time.Time { return time.Now().Add(time.Second + time.Duration(i%30)*100*time.Millisecond) }
	producers.Add(1)
	go func() { // the Timeouts queue
		defer producers.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			batch := make([]*message.Message, 20)
			dues := make([]time.Time, len(batch))
			for j := range batch {
				dues[j] = dueSoon(i + j)
				batch[j] = message.NewMessage(watermill.NewUUID(), []byte("published"))
				batch[j].Metadata.Set(wire.HeaderExpire, wireparse.FormatExpire(dues[j]))
				batch[j].Metadata.Set(wire.HeaderDestination, dest)
			}
			sentAt := time.Now()
			errs, err := retryAcked(loadCtx, func(context.Context) error { return pub.Publish(wire.TimeoutsQueue(endpoint), batch...) })
			producerErrs.Add(int64(errs))
			if err != nil {
				return // stopped before it was durable: not counted
			}
			for j, m := range batch {
				got.add(m.UUID, dues[j], errs > 0)
			}
			got.mu.Lock()
			for _, m := range batch {
				got.queued[m.UUID] = sentAt
			}
			got.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	for range 2 {
		producers.Add(1)
		go func() { // Schedule
			defer producers.Done()
			for i := 0; loadCtx.Err() == nil; i++ {
				due := dueSoon(i)
				msg := newDelayed("scheduled", due)
				errs, err := retryAcked(loadCtx, func(ctx context.Context) error {
					_, err := n.manager.Schedule(ctx, dest, msg)
					return err
				})
				producerErrs.Add(int64(errs))
				if err != nil {
					return
				}
				got.add(msg.UUID, due, errs > 0)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	producers.Add(1)
	go func() { // ScheduleTx: an order and its timeout commit together
		defer producers.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			due := dueSoon(i)
			msg := newDelayed("order", due)
			order := msg.UUID
			committed := false
			errs, err := retryAcked(loadCtx, func(ctx context.Context) error {
				tx, err := app.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO orders_`+tag+` (id) VALUES ($1)`, order); err != nil {
					_ = tx.Rollback()
					var pe *pgconn.PgError
					if errors.As(err, &pe) && pe.Code == "23505" {
						committed = true // an earlier attempt's commit went through, unacknowledged
						return nil
					}
					return err
				}
				if _, err := n.manager.ScheduleTx(ctx, tx, dest, msg); err != nil {
					_ = tx.Rollback()
					return err
				}
				if err := tx.Commit(); err != nil {
					return err
				}
				committed = true
				return nil
			})
			producerErrs.Add(int64(errs))
			if err != nil || !committed {
				return
			}
			// Never resent once committed: the order's key tells an unacknowledged commit.
			got.add(msg.UUID, due, false)
			time.Sleep(20 * time.Millisecond)
		}
	}()

	delivered := func() failoverCounts {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _ := destRows(ctx, checker, dest) // fails while there is no primary, and before the first forward
		return c
	}
	require.Eventually(t, func() bool { return delivered().distinct >= 300 }, 2*time.Minute, 100*time.Millisecond,
		"deliveries under load before the kill")
	ackedAtKill, deliveredAtKill := got.count(), delivered().distinct
	killedAt := pair.killPrimary(t)
	time.Sleep(2 * time.Second) // the failover's detection, as a managed service takes its time
	promotedAt := pair.promote(t)
	t.Logf("promoted %s after the kill", promotedAt.Sub(killedAt).Round(time.Millisecond))

	// Both names are held again on the new primary: two session advisory locks there.
	newPrimary, err := sql.Open("pgx", pair.standbyDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = newPrimary.Close() })
	var heldAgainAt time.Time
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		holds, err := advisoryHolds(ctx, newPrimary)
		if err == nil && holds == 2 {
			heldAgainAt = time.Now()
			return true
		}
		return false
	}, time.Minute, 100*time.Millisecond, "the service's and the in-process manager's names held on the new primary")

	time.Sleep(10 * time.Second) // the load goes on on the new primary
	stop()
	producers.Wait()
	acked := got.count()
	require.Eventually(t, func() bool { return delivered().distinct >= acked }, 2*time.Minute, 250*time.Millisecond,
		"every acknowledged timeout delivered (%d of %d)", delivered().distinct, acked)
	time.Sleep(2 * time.Second) // a duplicate, if any, would be written now
	c := delivered()

	got.mu.Lock()
	// Duplicates by cause: a producer's resend; an E.Timeouts message in flight at the kill (the
	// store satellite had stored it, its ack died with the primary, so the new primary hands it
	// out again, and it is stored again if its timeout was delivered meanwhile); anything else.
	var lost, early, unknown, resentTwice, queuedTwice, forwardedTwice int
	var others []string // the duplicates no cause above explains, for the failure message
	var firstAfterKill time.Time
	for id, due := range got.due {
		at, ok := c.earliest[id]
		switch {
		case !ok:
			lost++
			continue
		case at.Before(due.Truncate(wire.Precision)):
			early++
		}
	}
	for id, at := range c.earliest {
		if _, ok := got.due[id]; !ok {
			unknown++ // a retried send the producer never saw succeed: delivered once, not counted
		}
		if at.After(killedAt) && (firstAfterKill.IsZero() || at.Before(firstAfterKill)) {
			firstAfterKill = at
		}
		switch extra := c.copies[id] - 1; {
		case extra <= 0:
		case got.resent[id]:
			resentTwice += extra
		case !got.queued[id].IsZero() && got.queued[id].Before(killedAt):
			queuedTwice += extra
		default:
			forwardedTwice += extra
			kind := "Schedule or ScheduleTx"
			if sent, ok := got.queued[id]; ok {
				kind = fmt.Sprintf("published %s after the kill", sent.Sub(killedAt).Round(time.Millisecond))
			}
			others = append(others, fmt.Sprintf("%s (%s, acknowledged %s after the kill, due %s after it, %d copies)", id, kind,
				got.at[id].Sub(killedAt).Round(time.Millisecond), got.due[id].Sub(killedAt).Round(time.Millisecond), c.copies[id]))
		}
	}
	resent := len(got.resent)
	got.mu.Unlock()
	require.False(t, firstAfterKill.IsZero(), "deliveries after the kill")
	resumed := firstAfterKill.Sub(promotedAt)

	// A twin of the service's name is refused by the new primary.
	twin := runCommand(t, "failover-twin", runArgs(endpoint, dsn, dsn, endpoint+".error",
		"--exactly-once", "--instance", svcInstance)...)
	code, _ := twin.wait(t, 2*time.Minute)
	_, refused := twin.find("instance name in use")
	probe, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Endpoint: endpoint})
	require.NoError(t, err)
	_, libErr := probe.HoldInstance(t.Context(), libInstance)
	require.NoError(t, probe.Close())

	faultLog(t, "sync standby, exactly once, multi-host DSN: %d acknowledged (%d at the kill, %d delivered then), "+
		"%d delivered, %d lost, %d early, %d duplicated (%d of timeouts a producer sent again after an attempt that failed without saying whether it went through, "+
		"%d such timeouts in all; %d of E.Timeouts messages published before the kill and handed out again by the new primary; %d others), "+
		"%d delivered that no producer saw acknowledged; "+
		"%d producer calls failed and were retried; promoted %s after the kill; first delivery %s after the kill, %s after the promotion; "+
		"both names held again %s after the promotion",
		acked, ackedAtKill, deliveredAtKill, c.distinct, lost, early, c.rows-c.distinct, resentTwice, resent, queuedTwice, forwardedTwice, unknown, producerErrs.Load(),
		promotedAt.Sub(killedAt).Round(time.Millisecond), firstAfterKill.Sub(killedAt).Round(time.Millisecond),
		resumed.Round(time.Millisecond), heldAgainAt.Sub(promotedAt).Round(time.Millisecond))

	require.Zero(t, lost, "nothing acknowledged is lost with a synchronous standby")
	require.Zero(t, early)
	// Exactly once is the forward's: a producer that sends a timeout again, not knowing whether
	// its first attempt went through, may have it stored again after the first was delivered.
	require.Zero(t, forwardedTwice, "exactly once: no duplicate but a producer's own resends and E.Timeouts messages in flight at the kill; the others:\n%s",
		strings.Join(others, "\n"))
	require.LessOrEqual(t, queuedTwice, 2*connect.ServiceConsumers,
		"E.Timeouts messages handed out again: at most what the two instances' store satellites had in flight")
	require.LessOrEqual(t, resumed, resumeBound, "deliveries resume within %s of the promotion", resumeBound)
	require.NotZero(t, code, "the twin exits non-zero; its output:\n%s", twin.output())
	require.True(t, refused, "the twin is refused for the name; its output:\n%s", twin.output())
	require.ErrorIs(t, libErr, persistence.ErrInstanceInUse, "the in-process manager's name is held on the new primary")
	require.True(t, svc.running(), "the service rode through the failover")
	svc.signal(t, sigterm)
	code, _ = svc.wait(t, time.Minute)
	require.Equal(t, 0, code, "a clean stop, no critical error")
	// startSQLNode's cleanup checks the in-process manager had no critical error.
}

// lagSample is the primary's view of its standby at one moment.
type lagSample struct {
	at        time.Time
	unwritten int64         // WAL the primary wrote that the standby had not yet written: lost with the primary
	bytes     int64         // WAL the primary wrote that the standby had not yet replayed (it replays it when promoted)
	replayLag time.Duration // pg_stat_replication.replay_lag
}

// sampleLag reads pg_stat_replication on the primary.
func sampleLag(ctx context.Context, primary *sql.DB) (lagSample, error) {
	var (
		s   lagSample
		lag sql.NullFloat64
	)
	err := primary.QueryRowContext(ctx, `SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), write_lsn), 0)::bigint,
	COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint,
	EXTRACT(EPOCH FROM replay_lag) FROM pg_stat_replication LIMIT 1`).Scan(&s.unwritten, &s.bytes, &lag)
	s.at = time.Now()
	if lag.Valid {
		s.replayLag = time.Duration(lag.Float64 * float64(time.Second))
	}
	return s, err
}

// TestFaultPostgresFailoverLossWindow measures what a failover loses under a heavy write load
// (24 writers storing timeouts one commit each and 4 storing 200 timeouts of 1 KiB per commit,
// as fast as the primary takes them, many times the drill's load): with a synchronous standby nothing acknowledged may be lost; with an
// asynchronous one the commits the standby had not yet received when the primary died are gone,
// which the figures count, with the replication lag seen just before the kill. Those lost are
// all recent: acknowledged within the last few seconds before the kill.
func TestFaultPostgresFailoverLossWindow(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) { // one pair at a time: the load is the point
			pair := newPGPair(t, mode)
			endpoint := "fl-" + randomHex(t, 4)
			const writers, bulkWriters, bulk = 24, 4, 200
			store, err := postgres.Open(t.Context(), postgres.Config{DSN: pair.dsn(), Endpoint: endpoint, MaxOpenConns: writers + bulkWriters})
			require.NoError(t, err)
			t.Cleanup(func() { _ = store.Close() })
			require.NoError(t, store.SetupInfrastructure(t.Context()))
			primary, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/timeoutmill?sslmode=disable&connect_timeout=5", pair.port))
			require.NoError(t, err)
			t.Cleanup(func() { _ = primary.Close() })

			got := newAcked()
			loadCtx, stop := context.WithCancel(context.Background())
			defer stop()
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; loadCtx.Err() == nil; i++ {
						to := persistence.Timeout{ID: fmt.Sprintf("w%d-%d-%s", w, i, watermill.NewShortUUID()), Destination: endpoint + ".due",
							Due: time.Now().Add(time.Hour), Payload: []byte("heavy")}
						ctx, cancel := context.WithTimeout(loadCtx, 5*time.Second)
						_, err := store.Store(ctx, to)
						cancel()
						if err != nil {
							return // the primary is gone: this writer's acknowledged commits are counted
						}
						got.add(to.ID, to.Due, false)
					}
				}()
			}
			kib := make([]byte, 1024)
			for w := range bulkWriters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; loadCtx.Err() == nil; i++ {
						batch := make([]persistence.Timeout, bulk)
						for j := range batch {
							batch[j] = persistence.Timeout{ID: fmt.Sprintf("b%d-%d-%d-%s", w, i, j, watermill.NewShortUUID()),
								Destination: endpoint + ".due", Due: time.Now().Add(time.Hour), Payload: kib}
						}
						ctx, cancel := context.WithTimeout(loadCtx, 10*time.Second)
						_, err := store.StoreMany(ctx, batch)
						cancel()
						if err != nil {
							return
						}
						for _, to := range batch {
							got.add(to.ID, to.Due, false)
						}
					}
				}()
			}
			var last, worst, worstUnwritten lagSample
			deadline := time.Now().Add(8 * time.Second)
			for time.Now().Before(deadline) {
				s, err := sampleLag(t.Context(), primary)
				if err == nil {
					last = s
					if s.bytes > worst.bytes {
						worst = s
					}
					if s.unwritten > worstUnwritten.unwritten {
						worstUnwritten = s
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			ackedBefore := got.count()
			killedAt := pair.killPrimary(t)
			wg.Wait()
			stop()
			promotedAt := pair.promote(t)

			got.mu.Lock()
			ids := make([]string, 0, len(got.due))
			for id := range got.due {
				ids = append(ids, id)
			}
			got.mu.Unlock()
			newPrimary, err := sql.Open("pgx", pair.standbyDSN())
			require.NoError(t, err)
			t.Cleanup(func() { _ = newPrimary.Close() })
			present := map[string]bool{}
			rows, err := newPrimary.QueryContext(t.Context(), `SELECT id FROM public."`+endpoint+`.timeouts" WHERE id = ANY($1)`, ids)
			require.NoError(t, err)
			for rows.Next() {
				var id string
				require.NoError(t, rows.Scan(&id))
				present[id] = true
			}
			require.NoError(t, rows.Err())
			rows.Close()

			var lost int
			var firstLost, lastKept time.Time
			var firstAck, lastAck time.Time
			got.mu.Lock()
			for id, at := range got.at {
				if firstAck.IsZero() || at.Before(firstAck) {
					firstAck = at
				}
				if at.After(lastAck) {
					lastAck = at
				}
				if !present[id] {
					lost++
					if firstLost.IsZero() || at.Before(firstLost) {
						firstLost = at
					}
				} else if at.After(lastKept) {
					lastKept = at
				}
			}
			got.mu.Unlock()
			rate := float64(len(ids)) / lastAck.Sub(firstAck).Seconds()
			window := time.Duration(0)
			if lost > 0 {
				window = killedAt.Sub(firstLost)
			}
			faultLog(t, "%s standby, %d writers of one timeout per commit, %d of %d: %d timeouts acknowledged (%.0f/s; %d when the sampling ended), %d lost; "+
				"the lost were acknowledged from %s before the kill on (the last kept %s before it); just before the kill the standby lacked %d bytes of WAL "+
				"and had %d to replay (replay_lag %s); the most it lacked %d bytes, the most to replay %d (replay_lag %s); promoted %s after the kill",
				mode, writers, bulkWriters, bulk, len(ids), rate, ackedBefore, lost, window.Round(time.Millisecond), killedAt.Sub(lastKept).Round(time.Millisecond),
				last.unwritten, last.bytes, last.replayLag.Round(time.Microsecond), worstUnwritten.unwritten, worst.bytes, worst.replayLag.Round(time.Microsecond),
				promotedAt.Sub(killedAt).Round(time.Millisecond))
			require.Greater(t, len(ids), 1000, "a heavy load was written")
			if mode == "sync" {
				require.Zero(t, lost, "a synchronous standby has every acknowledged commit")
				return
			}
			require.Less(t, window, 10*time.Second, "only the replication-lag window before the kill is lost")
		})
	}
}
