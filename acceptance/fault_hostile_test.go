package acceptance

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// hostileCase is one message a careless or hostile producer sends, and how it must end: on its
// destination (reason == ""), or on the error queue with a failure.reason containing reason.
type hostileCase struct {
	name    string
	queue   string // "timeouts" (default) or "dispatcher"
	headers amqp.Table
	body    []byte
	reason  string
	// dest is where a delivered message must arrive ("" = the test's destination).
	dest string
	// pending: accepted and stored for later, neither delivered nor rejected now.
	pending bool
	// silent: consumed and acked without a trace (an id nothing is stored under).
	silent bool
}

// TestFaultHostileInputEndsAsAnErrorOrADelivery sends a running `timeoutmill run` every kind
// of broken or hostile message, through the wire contract as any AMQP client could: each ends on
// the error queue with a failure.reason, or is delivered where a valid reading says, and the
// service goes on serving. Nothing is dropped without a trace, retried for ever, or crashes it.
func TestFaultHostileInputEndsAsAnErrorOrADelivery(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	e := newEnv(t, "hostile")
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	dest := e.queue("due")
	fresh := e.queue("never-declared") // nobody declares it before the service delivers there
	svc := startService(t, "hostile", runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--close-timeout", "10s")...)
	client := newBrokerClient(t, e.url)
	got := client.consumeKeeping(t, dest, true)
	errs := client.consumeKeeping(t, e.errorQueue, true)

	now := time.Now()
	soon := wireparse.FormatExpire(now.Add(time.Second))
	big := make([]byte, 16<<20)
	_, err := rand.Read(big)
	require.NoError(t, err)
	numericDest := int64(now.UnixNano() % 1e12)
	numericQueue := strconv.FormatInt(numericDest, 10)
	e.mu.Lock()
	e.queues = append(e.queues, numericQueue)
	e.mu.Unlock()
	longID := "id-too-long-" + strings.Repeat("x", 260) // longer than AMQP's 255-byte message-id: sent as Watermill's UUID header
	expire := func(v any) amqp.Table { return amqp.Table{wire.HeaderExpire: v, wire.HeaderDestination: dest} }
	cases := []hostileCase{
		{name: "expire-empty", headers: expire(""), reason: "is empty"},
		{name: "expire-blank", headers: expire("   "), reason: "is empty"},
		{name: "expire-garbage", headers: expire("next tuesday"), reason: "is not an RFC 3339 time"},
		{name: "expire-sql", headers: expire("'; DROP TABLE timeouts; --"), reason: "is not an RFC 3339 time"},
		{name: "expire-no-offset", headers: expire("2030-01-02T03:04:05"), reason: "is not an RFC 3339 time"},
		{name: "expire-year-10000", headers: expire("10000-01-01T00:00:00Z"), reason: "is out of range"},
		{name: "expire-9999-minus-offset", headers: expire("9999-12-31T23:30:00-01:00"), reason: "is out of range"},
		{name: "expire-9999-rounds-up", headers: expire("9999-12-31T23:59:59.9999999Z"), reason: "is out of range"},
		{name: "expire-integer", headers: expire(int64(1893456000)), reason: "is not an RFC 3339 time"},
		{name: "expire-far-past", headers: expire("1900-01-01T00:00:00Z")},
		{name: "expire-year-0001-plus-offset", headers: expire("0001-01-01T00:00:00+14:00")},
		{name: "expire-past-fraction-offset", headers: expire("2001-02-03T04:05:06.123456789-07:30")},
		{name: "expire-amqp-timestamp", headers: expire(now.Add(-time.Minute).Truncate(time.Second))},
		{name: "expire-9999-valid", headers: expire("9999-12-31T23:59:59Z"), pending: true},
		{name: "watermill-delay-garbage", headers: amqp.Table{wire.HeaderWatermillDelayedUntil: "soon", wire.HeaderDestination: dest}, reason: "is not an RFC 3339 time"},
		{name: "no-delay-header", headers: amqp.Table{wire.HeaderDestination: dest}, reason: "neither"},
		{name: "destination-missing", headers: amqp.Table{wire.HeaderExpire: soon}, reason: "is missing"},
		{name: "destination-empty", headers: amqp.Table{wire.HeaderExpire: soon, wire.HeaderDestination: ""}, reason: "is empty"},
		{name: "destination-blank", headers: amqp.Table{wire.HeaderExpire: soon, wire.HeaderDestination: " \t"}, reason: "is empty"},
		{name: "destination-control", headers: amqp.Table{wire.HeaderExpire: soon, wire.HeaderDestination: "a\x00b"}, reason: "control character"},
		{name: "destination-too-long", headers: amqp.Table{wire.HeaderExpire: soon, wire.HeaderDestination: strings.Repeat("d", 300)}, reason: "longer than"},
		// A number reads as its decimal string: a queue name like any other, so it is delivered there.
		{name: "destination-not-a-string", headers: amqp.Table{wire.HeaderExpire: soon, wire.HeaderDestination: numericDest}, dest: numericQueue},
		{name: "destination-reserved", headers: amqp.Table{wire.HeaderExpire: soon, wire.HeaderDestination: "amq.fault-" + e.endpoint}, reason: "ACCESS_REFUSED"},
		{name: "destination-never-declared", headers: amqp.Table{wire.HeaderExpire: soon, wire.HeaderDestination: fresh}, dest: fresh},
		{name: "headers-not-strings", headers: amqp.Table{
			wire.HeaderExpire: soon, wire.HeaderDestination: dest,
			"int": int32(-7), "float": 2.5, "bool": true, "bytes": []byte{0xff, 0}, "void": nil,
			"stamp": time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), "decimal": amqp.Decimal{Scale: 2, Value: 12345},
			"table": amqp.Table{"k": "v", "n": int64(1)}, "array": []any{"a", int16(2)},
			"x-death": []any{amqp.Table{"count": int64(3), "queue": "elsewhere", "reason": "expired"}},
		}},
		{name: "body-16MiB", headers: expire(soon), body: big},
		{name: "id-sql-'); DROP TABLE \"" + e.endpoint + ".timeouts\"; --", headers: expire(soon)},
		{name: longID, headers: amqp.Table{wire.HeaderExpire: soon, wire.HeaderDestination: dest, "_watermill_message_uuid": longID}, reason: "longer than 250"},
		{name: "dispatcher-unknown-id", queue: "dispatcher", body: []byte("no-such-timeout"), silent: true},
		{name: "dispatcher-sql-id", queue: "dispatcher", body: []byte(`x'); DELETE FROM "` + e.endpoint + `.timeouts"; --`), silent: true},
		{name: "dispatcher-empty", queue: "dispatcher", body: nil, reason: "empty payload"},
		{name: "dispatcher-too-long", queue: "dispatcher", body: bytes.Repeat([]byte("i"), 300), reason: "longer than a timeout id"},
		{name: "dispatcher-not-utf8", queue: "dispatcher", body: []byte{0xff, 0xfe, 'x'}, reason: "not valid UTF-8"},
		{name: "dispatcher-control", queue: "dispatcher", body: []byte("a\nb"), reason: "control character"},
	}
	ft := client.consumeKeeping(t, numericQueue, true)

	start := time.Now()
	for _, c := range cases {
		queue := wire.TimeoutsQueue(e.endpoint)
		if c.queue == "dispatcher" {
			queue = wire.DispatcherQueue(e.endpoint)
		}
		body := c.body
		if body == nil && c.queue != "dispatcher" {
			body = []byte("hostile " + c.name)
		}
		id := c.name
		if len(id) > 255 {
			id = "" // the UUID header carries it
		}
		e.publishRaw(t, queue, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Headers: c.headers, Body: body})
	}
	sent := time.Since(start)

	// A good one after all of them: the service still serves.
	good := watermill.NewUUID()
	e.publishRaw(t, wire.TimeoutsQueue(e.endpoint), amqp.Publishing{MessageId: good, Body: []byte("still served"), Headers: expire(soon)})
	require.Eventually(t, func() bool { return got.firstArrival(good) != (time.Time{}) }, 2*time.Minute, 50*time.Millisecond,
		"the service still delivers after the hostile messages:\n%s", svc.tail(20))
	// Wait for every expected outcome.
	freshTally := client.consumeKeeping(t, fresh, true)
	wantErrors, wantDelivered := 0, 0
	for _, c := range cases {
		switch {
		case c.reason != "":
			wantErrors++
		case !c.pending && !c.silent:
			wantDelivered++
		}
	}
	arrived := func() int { return got.distinct() - 1 + freshTally.distinct() + ft.distinct() }
	require.Eventually(t, func() bool { return errs.distinct() >= wantErrors && arrived() >= wantDelivered }, time.Minute, 100*time.Millisecond,
		"%d of %d on the error queue, %d of %d delivered", errs.distinct(), wantErrors, arrived(), wantDelivered)
	got.quiet(time.Second, 5*time.Second)
	errs.quiet(time.Second, 5*time.Second)

	outcomes := []string{}
	for _, c := range cases {
		short := c.name
		if len(short) > 40 {
			short = short[:40] + "…"
		}
		switch {
		case c.reason != "":
			d, ok := errs.delivery(c.name)
			require.True(t, ok, "%s: not on the error queue", short)
			reason, _ := d.Headers[wire.HeaderFailureReason].(string)
			require.Regexp(t, c.reason, reason, "%s: failure.reason", short)
			require.NotEmpty(t, d.Headers[wire.HeaderFailureQueue], short)
			outcomes = append(outcomes, short+" → error queue: "+reason)
		case c.pending:
			outcomes = append(outcomes, short+" → stored, due in year 9999")
		case c.silent:
			outcomes = append(outcomes, short+" → acked: nothing stored under that id")
		default:
			var d amqp.Delivery
			var ok bool
			switch c.dest {
			case fresh:
				d, ok = freshTally.delivery(c.name)
			case numericQueue:
				d, ok = ft.delivery(c.name)
			default:
				d, ok = got.delivery(c.name)
			}
			require.True(t, ok, "%s: not delivered", short)
			if c.body != nil {
				require.True(t, bytes.Equal(c.body, d.Body), "%s: body differs (%d bytes)", short, len(d.Body))
			}
			outcomes = append(outcomes, short+" → delivered")
		}
	}
	// Non-string headers arrive as strings, the broker's x-death dropped.
	d, _ := got.delivery("headers-not-strings")
	for k, v := range d.Headers {
		require.IsType(t, "", v, "header %s", k)
	}
	require.Equal(t, "-7", d.Headers["int"])
	require.Equal(t, "2030-01-02T03:04:05Z", d.Headers["stamp"])
	require.Equal(t, "123.45", d.Headers["decimal"])
	require.NotContains(t, d.Headers, "x-death")

	// Nothing stuck or retried in a loop: the satellite queues are empty, the store holds only the
	// year-9999 timeout, which the cancel command removes.
	require.Eventually(t, func() bool {
		return client.queueDepth(wire.TimeoutsQueue(e.endpoint)) == 0 && client.queueDepth(wire.DispatcherQueue(e.endpoint)) == 0
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, 1, storedTimeouts(dsn, e.endpoint))
	cancel := runCommand(t, "cancel", "cancel", "--endpoint", e.endpoint, "--store", dsn, "expire-9999-valid")
	code, _ := cancel.wait(t, time.Minute)
	require.Equal(t, 0, code, cancel.output())
	require.Zero(t, storedTimeouts(dsn, e.endpoint))
	require.True(t, svc.running())
	require.Zero(t, svc.count(criticalLogged))

	faultLog(t, "%d hostile messages sent in %s: %d to the error queue with a reason, %d delivered, 1 stored for year 9999, "+
		"2 unknown dispatcher ids acked; service still serving, no critical error:\n  %s",
		len(cases), sent.Round(time.Millisecond), wantErrors, wantDelivered, strings.Join(outcomes, "\n  "))
	svc.signal(t, sigterm)
	code, _ = svc.wait(t, time.Minute)
	require.Equal(t, 0, code)
}

// TestFaultHostileEndpointNames gives the command endpoint names with quotes, semicolons and
// SQL: each either works, with its table created under exactly that (quoted) name and nothing
// else touched, or is refused with an error that names the problem. A table beside it survives.
func TestFaultHostileEndpointNames(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	names := []string{
		`o'rders`,
		`x";DROP_TABLE_canary;--`,
		`a');DELETE_FROM_canary;--`,
		`$$;DROP_TABLE_canary;$$`,
		"`tick`;DROP_TABLE_canary",
		`x; DROP TABLE canary; --`, // whitespace: refused by the endpoint rules
		`Robert'); DROP TABLE canary;--`,
	}
	type store struct {
		name string
		dsn  string
		db   *sql.DB
	}
	pgDSN := postgresDatabase(t, testenv.PostgresDSN(t))
	pg, err := sql.Open("pgx", pgDSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Close() })
	myDSN, _ := testenv.MySQLDatabase(t)
	my, err := sql.Open("mysql", myDSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = my.Close() })
	litePath := filepath.Join(t.TempDir(), "t.db")
	stores := []store{
		{name: "postgres", dsn: pgDSN, db: pg},
		{name: "mysql", dsn: "mysql://" + myDSN, db: my},
		{name: "sqlite", dsn: "sqlite://" + litePath},
	}
	ctx := context.Background()
	for _, s := range stores {
		if s.db != nil {
			_, err := s.db.ExecContext(ctx, "CREATE TABLE canary (id INT)")
			require.NoError(t, err)
			_, err = s.db.ExecContext(ctx, "INSERT INTO canary VALUES (1)")
			require.NoError(t, err)
		}
	}
	e := newEnv(t, "names") // the broker connection, and deletion of the queues setup declares
	var report []string
	for _, s := range stores {
		for _, name := range names {
			if wireparse.ValidateName("endpoint", name) == nil {
				e.mu.Lock()
				e.queues = append(e.queues, wire.TimeoutsQueue(name), wire.DispatcherQueue(name))
				e.mu.Unlock()
			}
			setup := runCommand(t, "setup", "setup", "--endpoint", name, "--store", s.dsn, "--transport", e.url, "--error-queue", e.errorQueue)
			code, _ := setup.wait(t, time.Minute)
			out := setup.output()
			if code != 0 {
				require.Equal(t, 1, code, "%s %q: %s", s.name, name, out)
				require.NotContains(t, strings.ToLower(out), "syntax", "%s %q: a refusal, not SQL that broke: %s", s.name, name, out)
				require.NotContains(t, out, "panic", "%s %q", s.name, name)
				report = append(report, s.name+" "+name+": refused: "+strings.TrimSpace(lastLine(out)))
				continue
			}
			stats := runCommand(t, "stats", "stats", "--endpoint", name, "--store", s.dsn)
			code, _ = stats.wait(t, time.Minute)
			require.Equal(t, 0, code, "%s %q: %s", s.name, name, stats.output())
			require.Contains(t, stats.output(), "pending:      0", "%s %q", s.name, name)
			if s.db != nil {
				var n int
				q := "SELECT count(*) FROM information_schema.tables WHERE table_name = $1"
				if s.name == "mysql" {
					q = "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
				}
				require.NoError(t, s.db.QueryRowContext(ctx, q, name+".timeouts").Scan(&n))
				require.Equal(t, 1, n, "%s: the table is named exactly %q", s.name, name+".timeouts")
			}
			report = append(report, s.name+" "+name+": works, table named exactly after it")
		}
		if s.db != nil {
			var n int
			require.NoError(t, s.db.QueryRowContext(ctx, "SELECT count(*) FROM canary").Scan(&n), "%s: the canary table survives", s.name)
			require.Equal(t, 1, n, "%s: the canary row survives", s.name)
		}
	}
	faultLog(t, "endpoint names:\n  %s", strings.Join(report, "\n  "))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
