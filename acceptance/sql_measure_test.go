package acceptance

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

// measureEnv turns on the measurements of the SQL transport: they take minutes, and their
// figures mean something only on a machine that runs nothing else.
const measureEnv = "TIMEOUTMILL_MEASURE"

func skipUnlessMeasuring(t *testing.T) {
	t.Helper()
	if os.Getenv(measureEnv) == "" {
		t.Skipf("a measurement, not a test: set %s=1 to run it (minutes, best on an idle machine)", measureEnv)
	}
}

// TestSQLMeasureBacklogDrain stores 5,000 timeouts due at one instant on PostgreSQL, with one
// endpoint instance running, and measures the time from the due instant to the last arrival, in
// both delivery modes and with one and with four consumers per queue. Every message must arrive
// exactly once.
func TestSQLMeasureBacklogDrain(t *testing.T) {
	skipUnlessMeasuring(t)
	const count = 5000
	for _, consumers := range []int{1, 4} {
		for _, exactlyOnce := range []bool{false, true} {
			name := fmt.Sprintf("consumers=%d/exactly-once=%t", consumers, exactlyOnce)
			t.Run(name, func(t *testing.T) {
				b := sqlBackend{name: "postgres", dialect: sqltransport.PostgreSQL, exactlyOnce: exactlyOnce}
				e := newSQLEnv(t, b, "drain")
				e.tune = func(c *sqltransport.Config) { c.Consumers = consumers }
				store := e.store(t)
				dest := "drained"
				due := time.Now().Add(8 * time.Second)
				fill(t, store, dest, count, due)
				require.True(t, time.Now().Before(due), "storing outlasted the due time")
				startSQLNode(t, e, store, nil)
				delivered := sqlReceive(t, e, dest)

				seen := make(map[string]bool, count)
				var last time.Time
				for len(seen) < count {
					got := await(t, delivered, time.Until(due)+2*time.Minute)
					require.False(t, seen[got.msg.UUID], "%s delivered twice", got.msg.UUID)
					seen[got.msg.UUID] = true
					last = got.at
				}
				requireNothing(t, delivered, 2*time.Second)
				drain := last.Sub(due)
				t.Logf("%s: %d timeouts due at one instant drained %s after due (%.0f deliveries/s), each once",
					name, count, drain.Round(time.Millisecond), count/drain.Seconds())
			})
		}
	}
}

// fill stores count timeouts for dest, due at due, from 16 goroutines.
func fill(t *testing.T, store persistence.Store, dest string, count int, due time.Time) {
	t.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(count); i = next.Add(1) {
				id := watermill.NewUUID()
				_, err := store.Store(context.Background(), persistence.Timeout{
					ID: id, Destination: dest, Due: due, Payload: fmt.Appendf(nil, `{"n":%d}`, i),
					Metadata: map[string]string{"_watermill_message_uuid": id},
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("stored %d timeouts in %s", count, time.Since(start).Round(time.Millisecond))
}

// TestSQLMeasureLateness sends a steady stream of delayed messages (50 a second, delays of 0.5 to
// 3 s) through one endpoint instance on PostgreSQL and reports how late they arrive, for several
// poll intervals.
func TestSQLMeasureLateness(t *testing.T) {
	skipUnlessMeasuring(t)
	const (
		count = 300
		rate  = 50 // per second
	)
	for _, poll := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second} {
		for _, exactlyOnce := range []bool{false, true} {
			name := fmt.Sprintf("poll=%s/exactly-once=%t", poll, exactlyOnce)
			t.Run(name, func(t *testing.T) {
				b := sqlBackend{name: "postgres", dialect: sqltransport.PostgreSQL, exactlyOnce: exactlyOnce}
				e := newSQLEnv(t, b, "late")
				e.tune = func(c *sqltransport.Config) { c.PollInterval = poll }
				n := startSQLNode(t, e, e.store(t), nil)
				dest := "stream"
				delivered := sqlReceive(t, e, dest)

				due := make(map[string]time.Time, count)
				var mu sync.Mutex
				go func() {
					tick := time.NewTicker(time.Second / rate)
					defer tick.Stop()
					for range count {
						<-tick.C
						msg := message.NewMessage(watermill.NewUUID(), []byte("tick"))
						at := time.Now().Add(500*time.Millisecond + rand.N(2500*time.Millisecond))
						timeouts.DeliverAt(msg, at)
						mu.Lock()
						due[msg.UUID] = at
						mu.Unlock()
						if err := n.manager.Publisher().Publish(dest, msg); err != nil {
							t.Error(err)
							return
						}
					}
				}()
				late := make([]time.Duration, 0, count)
				for len(late) < count {
					got := await(t, delivered, lateBound)
					mu.Lock()
					at, ok := due[got.msg.UUID]
					mu.Unlock()
					require.True(t, ok)
					require.False(t, got.at.Before(at), "delivered early")
					late = append(late, got.at.Sub(at))
				}
				slices.Sort(late)
				t.Logf("%s: lateness p50 %s, p99 %s, max %s over %d messages",
					name, pct(late, 50), pct(late, 99), late[len(late)-1].Round(time.Millisecond), count)
			})
		}
	}
}

// TestSQLMeasureIdleCost runs one idle endpoint instance and a receiver of one destination on a
// PostgreSQL database of their own, and counts the transactions a second their consumers cost
// (pg_stat_database), for several poll intervals: the price of a shorter one.
func TestSQLMeasureIdleCost(t *testing.T) {
	skipUnlessMeasuring(t)
	for _, poll := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second} {
		t.Run(fmt.Sprintf("poll=%s", poll), func(t *testing.T) {
			e := &sqlEnv{sqlBackend: sqlBackend{name: "postgres", dialect: sqltransport.PostgreSQL}, endpoint: "idle", schema: "public"}
			e.dsn = ownDatabase(t)
			db, err := sql.Open("pgx", e.dsn)
			require.NoError(t, err)
			defer db.Close()
			e.db = db
			e.tune = func(c *sqltransport.Config) { c.PollInterval = poll }
			startSQLNode(t, e, e.store(t), nil)
			sqlReceive(t, e, "destination")
			time.Sleep(2 * time.Second) // settled, statistics flushed
			const during = 10 * time.Second
			before := transactions(t, db)
			time.Sleep(during)
			tps := float64(transactions(t, db)-before) / during.Seconds()
			t.Logf("poll=%s: an idle instance (2 queues) and a receiver (1 queue), one consumer each: %.0f transactions/s", poll, tps)
		})
	}
}

// transactions is how many transactions the database has committed or rolled back.
func transactions(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var n int64
	_, _ = db.ExecContext(context.Background(), `SELECT pg_stat_clear_snapshot()`)
	require.NoError(t, db.QueryRowContext(context.Background(),
		`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}

// ownDatabase creates a PostgreSQL database of the test's own, dropped when it ends, and returns
// its DSN.
func ownDatabase(t *testing.T) string {
	t.Helper()
	base := testenv.PostgresDSN(t)
	name := testenv.UniqueName(t, "tmdb")
	admin, err := sql.Open("pgx", base)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	_, err = admin.ExecContext(context.Background(), "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i].Round(time.Millisecond)
}
