package acceptance

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

// TestClockSkewNeverEarlyByTheStoresClock is the clock-skew drill: two managers on one store, on
// PostgreSQL and on MariaDB (transport and store on one database, as `timeoutmill run` runs
// them), one on the system clock and one whose clock runs 3 s ahead, then, halfway, 3 s behind.
// 2,000 timeouts come due over 20 s. The store's clock decides due: none is forwarded (so none
// arrives) before its due time by the store's clock, neither instance adds its clock's error to
// lateness, and only the skewed one raises the skew alarm.
func TestClockSkewNeverEarlyByTheStoresClock(t *testing.T) {
	if testing.Short() {
		t.Skip("clock-skew drill: 20 s of deliveries on each of two servers; skipped with -short")
	}
	for _, b := range []sqlBackend{
		{name: "postgres", dialect: sqltransport.PostgreSQL},
		{name: "mariadb", dialect: sqltransport.MySQL},
	} {
		// One server at a time: lateness is what the drill measures.
		t.Run(b.name, func(t *testing.T) { clockSkewDrill(t, newSQLEnv(t, b, "skew")) })
	}
}

const (
	skewCount  = 2000
	skewSpread = 20 * time.Second
	skew       = 3 * time.Second
	// skewLatenessBound is how much later than the other instance the skewed one may forward
	// (p99): generous on a loaded machine, where two instances on one clock differ by up to a
	// second, and still short of the 3 s it would add by following its own clock.
	skewLatenessBound = 2 * time.Second
)

func clockSkewDrill(t *testing.T, e *sqlEnv) {
	// The reference clock is the store's: the test reads the database's time itself, with SQL of
	// its own, and stamps each forward and arrival with the system clock corrected by that offset.
	ref := measureStoreClock(t, e)
	t.Logf("the test's offset to the store's clock: %s (± %s)", ref.offset, ref.err)

	clock := &offsetClock{}
	clock.set(skew)
	forwarders := &forwarderLog{by: map[string]forward{}}
	dest := "due"
	nodes := []*skewNode{{name: "true-clock"}, {name: "skewed-clock", skewed: true}}
	for _, n := range nodes {
		n.registry = prometheus.NewRegistry()
		n.log = &warnLog{LoggerAdapter: testLogger()}
		n.sql = startSQLNodeLogged(t, e, e.store(t), n.log, func(c *timeouts.Config) {
			c.Instance = n.name
			c.PollInterval = time.Second
			c.MetricsRegisterer = n.registry
			c.Publisher = &recordingPublisher{Publisher: c.Publisher, instance: n.name, topic: dest, log: forwarders}
			if n.skewed {
				c.Clock = clock
			}
		})
	}
	delivered := sqlReceive(t, e, dest)

	// The producer stamps absolute due times on the store's clock; the skewed clock goes from 3 s
	// ahead to 3 s behind halfway through.
	first := ref.now().Add(5 * time.Second)
	due := map[string]time.Time{}
	for i, id := range fillSpread(t, e.store(t), dest, skewCount, first, skewSpread) {
		due[id] = first.Add(time.Duration(int64(skewSpread) * int64(i) / int64(skewCount-1)))
	}
	require.True(t, ref.now().Before(first), "storing outlasted the first due time")
	switchAt := first.Add(skewSpread / 2)
	// Each instance's offset as its accessor reports it, just before the switch and at the end;
	// and whether the alarm was ever raised.
	var before, after [2]timeouts.ClockOffset
	var everAlarmed [2]atomic.Bool
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for !ref.now().After(switchAt) {
			<-tick.C
			for i, n := range nodes {
				c := n.sql.manager.ClockOffset()
				if c.Alarm {
					everAlarmed[i].Store(true)
				}
				if ref.now().Before(switchAt) {
					before[i] = c
				}
			}
		}
		clock.set(-skew)
		for !ref.now().After(first.Add(skewSpread)) {
			<-tick.C
			for i, n := range nodes {
				if n.sql.manager.ClockOffset().Alarm {
					everAlarmed[i].Store(true)
				}
			}
		}
	}()

	// Forwards, by the instance that made them and by the half of the run they were due in: how
	// late each instance forwarded, which is what its clock decides. Arrivals come after the
	// forward, through the transport.
	late := map[string]*[2][]time.Duration{}
	for _, n := range nodes {
		late[n.name] = &[2][]time.Duration{}
	}
	seen := map[string]int{}
	var early, arrivals []time.Duration
	for len(seen) < skewCount {
		a := await(t, delivered, untilDue(first.Add(skewSpread))+stallBound)
		d, ok := due[a.msg.UUID]
		require.True(t, ok, "delivered %s, which the test never stored", a.msg.UUID)
		seen[a.msg.UUID]++
		if seen[a.msg.UUID] > 1 {
			continue
		}
		f := forwarders.of(a.msg.UUID)
		require.NotEmpty(t, f.instance, "no instance forwarded %s", a.msg.UUID)
		// On the store's clock, within the error of the test's reading of it.
		forwarded, arrived := f.at.Add(ref.offset), a.at.Add(ref.offset)
		if forwarded.Add(ref.err).Before(d) {
			early = append(early, d.Sub(forwarded))
		}
		half := 0
		if !d.Before(switchAt) {
			half = 1
		}
		late[f.instance][half] = append(late[f.instance][half], forwarded.Sub(d))
		arrivals = append(arrivals, arrived.Sub(d))
	}
	<-sampled
	for i, n := range nodes {
		after[i] = n.sql.manager.ClockOffset()
	}
	duplicates := 0
	for _, n := range seen {
		duplicates += n - 1
	}
	slices.Sort(early)
	t.Logf("%d timeouts delivered, %d twice or more; %d forwarded early by the store's clock", len(seen), duplicates, len(early))
	if len(early) > 0 {
		t.Logf("early: p50 %s, max %s", pct(early, 50), early[len(early)-1].Round(time.Millisecond))
	}
	t.Logf("arrivals: %s", latenessSummary(arrivals))
	for i, n := range nodes {
		t.Logf("%s: forwards while the skewed clock ran 3 s ahead: %s; 3 s behind: %s", n.name,
			latenessSummary(late[n.name][0]), latenessSummary(late[n.name][1]))
		t.Logf("%s: offset to the store's clock %s (± %s) before the switch, %s (± %s) at the end; %d skew warnings",
			n.name, before[i].Offset, before[i].Error, after[i].Offset, after[i].Error, len(n.log.warnings()))
	}

	require.Zero(t, len(early), "timeouts forwarded before their due time by the store's clock")
	// Neither instance adds its clock's error to lateness. An instance that held forwards by a
	// clock 3 s behind would forward everything 3 s later than the other, or leave it all to the
	// other (it gives back what it finds not due yet by its clock). Lateness is compared between
	// the instances of one run, not with a fixed bound: on a loaded machine the drain itself may
	// be seconds late, for both alike.
	for half, phase := range []string{"3 s ahead", "3 s behind"} {
		trueLate, skewedLate := late[nodes[0].name][half], late[nodes[1].name][half]
		total := len(trueLate) + len(skewedLate)
		for _, n := range nodes {
			require.GreaterOrEqual(t, len(late[n.name][half]), total/5,
				"%s forwarded less than a fifth of the timeouts due while the skewed clock ran %s", n.name, phase)
		}
		require.Less(t, pct(skewedLate, 99)-pct(trueLate, 99), skewLatenessBound,
			"lateness p99 of the skewed instance over the other's while its clock ran %s", phase)
	}

	// The alarm: raised for the skewed instance only, in the accessor, the metric and the log.
	for i, n := range nodes {
		metric := clockOffsetMetric(t, n.registry)
		require.InDelta(t, after[i].Offset.Seconds(), metric, 0.5, "%s: timeoutmill_clock_offset_seconds is the accessor's offset", n.name)
		if !n.skewed {
			require.False(t, everAlarmed[i].Load(), "the instance on the store's clock never raises the alarm")
			requireOffsetWithin(t, after[i], 0, "the instance on the store's clock")
			require.Empty(t, n.log.warnings(), "the instance on the store's clock warns of no skew")
			continue
		}
		require.True(t, before[i].Alarm && after[i].Alarm, "the skewed instance raises the alarm")
		requireOffsetWithin(t, before[i], -skew, "the skewed instance, 3 s ahead")
		requireOffsetWithin(t, after[i], skew, "the skewed instance, 3 s behind")
		// A warning when the offset goes above the alarm and one when it moves by 6 s; a third
		// only when a measurement straddled the switch and saw an offset in between.
		warned := n.log.warnings()
		require.GreaterOrEqual(t, len(warned), 2, "a warning for each change of the skew")
		require.LessOrEqual(t, len(warned), 3, "a warning per change, not per measurement: %v", warned)
	}
}

// requireOffsetWithin checks the bound of a measurement: the true offset lies within its error
// (half its round trip) of the offset measured, give or take the databases' microseconds.
func requireOffsetWithin(t *testing.T, c timeouts.ClockOffset, want time.Duration, who string) {
	t.Helper()
	require.True(t, c.Measured, "%s: measured", who)
	require.LessOrEqual(t, (c.Offset - want).Abs(), c.Error+time.Millisecond,
		"%s: measured %s, true offset %s, error bound %s", who, c.Offset, want, c.Error)
}

// skewNode is one instance of the drill.
type skewNode struct {
	name     string
	skewed   bool // on the offsetClock rather than the system clock
	registry *prometheus.Registry
	log      *warnLog
	sql      *sqlNode
}

// warnLog is a logger that keeps the messages logged at warn level (the level the skew alarm
// uses when the logger has one) and passes everything on.
type warnLog struct {
	watermill.LoggerAdapter
	mu     sync.Mutex
	warned []string
}

func (l *warnLog) Warn(msg string, fields watermill.LogFields) {
	l.mu.Lock()
	l.warned = append(l.warned, fmt.Sprintf("%s %v", msg, fields))
	l.mu.Unlock()
	l.LoggerAdapter.Info("WARN "+msg, fields)
}

// With keeps the warnings of the derived logger in l.
func (l *warnLog) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &derivedWarnLog{LoggerAdapter: l.LoggerAdapter.With(fields), root: l}
}

func (l *warnLog) warnings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.warned)
}

// derivedWarnLog is a warnLog's With.
type derivedWarnLog struct {
	watermill.LoggerAdapter
	root *warnLog
}

func (l *derivedWarnLog) Warn(msg string, fields watermill.LogFields) { l.root.Warn(msg, fields) }

func (l *derivedWarnLog) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &derivedWarnLog{LoggerAdapter: l.LoggerAdapter.With(fields), root: l.root}
}

// offsetClock is the system clock shifted by an offset that the drill changes as it runs.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) set(d time.Duration) { c.offset.Store(int64(d)) }

// Now is the system time shifted by the offset.
func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// forwarderLog records which instance forwarded each message, and when (the system clock).
type forwarderLog struct {
	mu sync.Mutex
	by map[string]forward
}

type forward struct {
	instance string
	at       time.Time
}

// of returns the first forward of id.
func (f *forwarderLog) of(id string) forward {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.by[id]
}

// recordingPublisher is an instance's publisher that notes which instance forwards each message to
// topic, and when it starts to: the time the instance decided the message was due.
type recordingPublisher struct {
	message.Publisher
	instance, topic string
	log             *forwarderLog
}

// Publish notes the messages before it forwards them: the receiver may have one before Publish
// returns. The first forward of a message is kept: it is the one that must not be early.
func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic == p.topic {
		now := time.Now()
		p.log.mu.Lock()
		for _, m := range msgs {
			if _, ok := p.log.by[m.UUID]; !ok {
				p.log.by[m.UUID] = forward{instance: p.instance, at: now}
			}
		}
		p.log.mu.Unlock()
	}
	return p.Publisher.Publish(topic, msgs...)
}

// storeClock is the store's clock as the test reads it: the system clock plus offset, within err.
type storeClock struct{ offset, err time.Duration }

func (c storeClock) now() time.Time { return time.Now().Add(c.offset) }

// measureStoreClock reads the database's time a few times and keeps the reading with the
// shortest round trip: the database read its clock within that trip, so the offset is known
// within half of it.
func measureStoreClock(t *testing.T, e *sqlEnv) storeClock {
	t.Helper()
	query := `SELECT EXTRACT(EPOCH FROM clock_timestamp())::text`
	if e.dialect == sqltransport.MySQL {
		query = `SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) AS CHAR)`
	}
	conn, err := e.db.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	best := storeClock{err: time.Hour}
	for range 10 {
		var text string
		sent := time.Now()
		require.NoError(t, conn.QueryRowContext(context.Background(), query).Scan(&text))
		back := time.Now()
		at, err := parseEpoch(text)
		require.NoError(t, err)
		if rtt := back.Sub(sent); rtt/2 < best.err {
			best = storeClock{offset: at.Sub(sent.Add(rtt / 2)), err: rtt / 2}
		}
	}
	return best
}

// parseEpoch reads seconds since 1970 with up to 9 decimals, as the databases print them.
func parseEpoch(s string) (time.Time, error) {
	whole, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("the database's time %q: %w", s, err)
	}
	var ns int64
	if frac != "" {
		if ns, err = strconv.ParseInt((frac + "000000000")[:9], 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("the database's time %q: %w", s, err)
		}
	}
	return time.Unix(sec, ns), nil
}

// fillSpread stores count timeouts for dest with StoreMany, 100 a call from 4 goroutines, the i-th
// due at first + spread * i / (count - 1), and returns their ids in that order.
func fillSpread(t *testing.T, store persistence.Store, dest string, count int, first time.Time, spread time.Duration) []string {
	t.Helper()
	const batch = 100
	ids := make([]string, count)
	ts := make([]persistence.Timeout, count)
	for i := range ids {
		ids[i] = watermill.NewUUID()
		ts[i] = persistence.Timeout{
			ID: ids[i], Destination: dest, Due: first.Add(time.Duration(int64(spread) * int64(i) / int64(count-1))),
			Payload: fmt.Appendf(nil, `{"n":%d}`, i), Metadata: map[string]string{"_watermill_message_uuid": ids[i]},
		}
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := int(next.Add(batch)) - batch; from < count; from = int(next.Add(batch)) - batch {
				stored, err := store.(persistence.BatchStore).StoreMany(context.Background(), ts[from:min(from+batch, count)])
				if err != nil {
					t.Error(err)
					return
				}
				if len(stored) != min(batch, count-from) {
					t.Errorf("stored %d of %d new timeouts", len(stored), min(batch, count-from))
				}
			}
		}()
	}
	wg.Wait()
	return ids
}

// latenessSummary is "N forwarded, p50 .., p99 .., max ..", sorting ls.
func latenessSummary(ls []time.Duration) string {
	if len(ls) == 0 {
		return "none forwarded"
	}
	slices.Sort(ls)
	return fmt.Sprintf("%d, lateness p50 %s, p99 %s, max %s", len(ls), pct(ls, 50), pct(ls, 99), ls[len(ls)-1].Round(time.Millisecond))
}

// clockOffsetMetric is the value of timeoutmill_clock_offset_seconds in registry.
func clockOffsetMetric(t *testing.T, registry *prometheus.Registry) float64 {
	t.Helper()
	families, err := registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "timeoutmill_clock_offset_seconds" {
			require.Len(t, f.GetMetric(), 1)
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no timeoutmill_clock_offset_seconds among the metrics")
	return 0
}
