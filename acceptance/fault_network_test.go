package acceptance

import (
	"context"
	"database/sql"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The network-fault cases put toxiproxy (toxiproxy_test.go) between a `timeoutmill run` process
// and the shared PostgreSQL (its store) and RabbitMQ (its transport), and poison the traffic
// through it: a black hole (toxiproxy's timeout toxic with timeout 0: every byte either way is
// dropped and no connection is closed, so calls hang rather than fail), latency, resets, sliced
// packets, a thin pipe. The servers stay up and the test's own producer and consumers reach them
// directly, so what they count does not depend on the network under test.
//
// A black hole is harsher than dropped packets: TCP resends a dropped packet once the network is
// back, while what toxiproxy drops is gone, and a connection it crossed must be given up. Either
// way, a call that never returns tells no breaker anything by itself.

// networkTarget is what a fault is put on: the store's connections, the broker's, or both.
type networkTarget struct {
	name          string // of the subtest
	what          string // in the figures
	store, broker bool
	// messages are the critical errors a fault there may raise: the stages that call that server
	// (fetching due timeouts and storing and dispatching them call the store; announcing and
	// forwarding them call the broker, and so may acknowledging a stored one).
	messages []string
}

var (
	onStore  = networkTarget{name: "store", what: "the store", store: true, messages: []string{critical.FetchMessage, critical.StoreMessage, critical.DispatchMessage}}
	onBroker = networkTarget{name: "broker", what: "the broker", broker: true, messages: []string{critical.DispatchMessage, critical.StoreMessage}}
	onBoth   = networkTarget{name: "both", what: "the store and the broker", store: true, broker: true, messages: []string{critical.FetchMessage, critical.StoreMessage, critical.DispatchMessage}}
)

// breakerMessages is the message of each breaker, by the name a critical error gives it.
var breakerMessages = map[string]string{
	"fetch":    critical.FetchMessage,
	"store":    critical.StoreMessage,
	"dispatch": critical.DispatchMessage,
}

var breakerName = regexp.MustCompile(`\((\w+) breaker`)

// networkRig is one endpoint's service whose store and broker connections go through proxies of
// the test's own.
type networkRig struct {
	e      *env
	dsn    string // the endpoint's database, reached directly
	store  *faultProxy
	broker *faultProxy
	client *brokerClient
	dest   string
	got    *tally
	errs   *tally
	args   []string // of `timeoutmill run`, for a restart
	svc    *service
}

// newNetworkRig starts `timeoutmill run` through two new proxies, one to the shared PostgreSQL
// (a database of the test's own) and one to the shared RabbitMQ, with the extra flags given.
func newNetworkRig(t *testing.T, tag string, extra ...string) *networkRig {
	t.Helper()
	skipFaultShort(t)
	tp := newToxiproxy(t)
	e := newEnv(t, tag)
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	r := &networkRig{e: e, dsn: dsn, dest: e.queue("due")}
	r.store = newFaultProxy(t, tp, tag+"-pg", hostPort(t, dsn))
	r.broker = newFaultProxy(t, tp, tag+"-amqp", hostPort(t, e.url))
	r.client = newBrokerClient(t, e.url)
	// A fixed instance name: a process started after a critical error takes back at once what
	// the stopped one had claimed, instead of after the claim lease.
	flags := append([]string{"--instance", e.endpoint, "--close-timeout", "5s"}, extra...)
	r.args = runArgs(e.endpoint, r.store.via(t, dsn), r.broker.via(t, e.url), e.errorQueue, flags...)
	r.svc = startService(t, tag, r.args...)
	r.got = r.client.consume(t, r.dest)
	r.errs = r.client.consume(t, e.errorQueue)
	return r
}

func hostPort(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	require.NotEmpty(t, u.Host, "no host in %s", rawURL)
	return u.Host
}

// proxies are the proxies of target.
func (r *networkRig) proxies(target networkTarget) []*faultProxy {
	var ps []*faultProxy
	if target.store {
		ps = append(ps, r.store)
	}
	if target.broker {
		ps = append(ps, r.broker)
	}
	return ps
}

// poison adds a toxic of kind to both streams of target's proxies.
func (r *networkRig) poison(t *testing.T, target networkTarget, kind string, attrs toxiproxy.Attributes, streams ...string) {
	t.Helper()
	for _, p := range r.proxies(target) {
		p.add(t, kind, attrs, streams...)
	}
}

// blackHole drops everything either way through target's proxies, closing nothing.
func (r *networkRig) blackHole(t *testing.T, target networkTarget) {
	t.Helper()
	r.poison(t, target, "timeout", toxiproxy.Attributes{"timeout": 0}, "upstream", "downstream")
}

// heal removes every toxic: the network is sound again.
func (r *networkRig) heal(t *testing.T) {
	t.Helper()
	r.store.clear(t)
	r.broker.clear(t)
}

// send sends msgs to the endpoint's Timeouts queue, directly, and says how long that took.
func (r *networkRig) send(t *testing.T, msgs []timeoutMsg) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := r.client.send(ctx, wire.TimeoutsQueue(r.e.endpoint), msgs)
	require.NoError(t, err)
	return time.Since(start)
}

// inFlight is what is in flight when a fault begins: the ids not delivered yet, and those
// delivered whose timeout the store still holds (removing it, or acknowledging the dispatcher
// message, may be what the fault hits). Call it just before the fault.
type inFlight struct {
	at     time.Time
	stored map[string]bool
}

func (r *networkRig) inFlightNow(t *testing.T) inFlight {
	t.Helper()
	at := time.Now()
	return inFlight{at: at, stored: r.storedIDs(t)}
}

// storedIDs are the ids in the endpoint's table: none while the service has not created it yet
// (it does so after it logs that it runs).
func (r *networkRig) storedIDs(t *testing.T) map[string]bool {
	t.Helper()
	db, err := sql.Open("pgx", r.dsn)
	require.NoError(t, err)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var exists bool
	table := `public."` + strings.ReplaceAll(r.e.endpoint+".timeouts", `"`, `""`) + `"`
	require.NoError(t, db.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
	if !exists {
		return map[string]bool{}
	}
	return storedIDs(t, r.dsn, r.e.endpoint)
}

// ids are the ids of msgs that were in flight.
func (f inFlight) ids(tl *tally, msgs []timeoutMsg) map[string]bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	in := map[string]bool{}
	for _, m := range msgs {
		if at, ok := tl.first[m.id]; !ok || !at.Before(f.at) || f.stored[m.id] {
			in[m.id] = true
		}
	}
	return in
}

// requireDuplicatesBounded fails t unless every id delivered more than once was in flight when
// the fault began, and the extra deliveries are no more than what was in flight.
func requireDuplicatesBounded(t *testing.T, f figures, in map[string]bool) {
	t.Helper()
	for _, id := range f.duplicatedIDs {
		require.True(t, in[id], "%s was delivered again though it was not in flight when the fault began", id)
	}
	require.LessOrEqual(t, f.duplicated, len(in), "duplicates bounded by what was in flight")
}

// settle waits for all of msgs (up to within), then for late duplicates, then until the store and
// the dispatcher queue are empty; it returns the figures and whether all came.
func (r *networkRig) settle(t *testing.T, msgs []timeoutMsg, within time.Duration) (figures, bool) {
	t.Helper()
	all := r.got.waitDistinct(len(msgs), within)
	if all {
		waitDrained(t, r.client, r.dsn, r.e.endpoint, 2*time.Minute)
	}
	r.got.quiet(2*time.Second, 15*time.Second)
	return r.got.figures(ids(msgs)), all
}

// stop sends SIGTERM and requires a clean exit.
func (r *networkRig) stop(t *testing.T, svc *service) {
	t.Helper()
	svc.signal(t, sigterm)
	code, _ := svc.wait(t, time.Minute)
	require.Equal(t, 0, code, "a clean stop:\n%s", svc.tail(20))
}

// early counts the timeouts of msgs that first arrived before they were due.
func (tl *tally) early(msgs []timeoutMsg) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for _, m := range msgs {
		if at, ok := tl.first[m.id]; ok && at.Before(wireparse.RoundUp(m.due)) {
			n++
		}
	}
	return n
}

// latenessQuantiles are the quantiles qs (0..1) of how late msgs first arrived after due, over
// those that arrived.
func (tl *tally) latenessQuantiles(msgs []timeoutMsg, qs ...float64) []time.Duration {
	tl.mu.Lock()
	var late []time.Duration
	for _, m := range msgs {
		if at, ok := tl.first[m.id]; ok {
			late = append(late, at.Sub(m.due))
		}
	}
	tl.mu.Unlock()
	out := make([]time.Duration, len(qs))
	if len(late) == 0 {
		return out
	}
	slices.Sort(late)
	for i, q := range qs {
		out[i] = late[min(len(late)-1, int(q*float64(len(late))))].Round(time.Millisecond)
	}
	return out
}

// lastArrival is when the last of msgs first arrived (zero if none did), how many first arrived
// after deadline, and how many did not arrive.
func (tl *tally) lastArrival(msgs []timeoutMsg, deadline time.Time) (last time.Time, after, missing int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, m := range msgs {
		at, ok := tl.first[m.id]
		if !ok {
			missing++
			continue
		}
		if at.After(deadline) {
			after++
		}
		if at.After(last) {
			last = at
		}
	}
	return last, after, missing
}

// exitWithin waits up to within for s to exit, without failing the test.
func exitWithin(s *service, within time.Duration) (code int, at time.Time, exited bool) {
	select {
	case <-s.exited:
	case <-time.After(within):
		return 0, time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitCode, time.Now(), true
}

// TestFaultNetworkBlackHoleForGood drops every packet to and from the store, the broker or both,
// for good, under load, with a 5 s outage wait: the calls in flight never return, yet the
// critical error comes within the wait plus 2 s (the product's promise), with the documented
// text of a stage that calls the silent server, and the process exits non-zero. Once the
// network is back, a new process delivers everything: none lost, none early.
func TestFaultNetworkBlackHoleForGood(t *testing.T) {
	t.Parallel()
	for _, target := range []networkTarget{onStore, onBroker, onBoth} {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			const (
				count = 2000
				wait  = 5 * time.Second
				// bound is the promise; outer only lets a service that breaks it show when it did.
				bound = wait + 2*time.Second
				outer = 90 * time.Second
			)
			r := newNetworkRig(t, "bh-"+target.name, "--outage-wait", wait.String())
			// Due from 6 s on (after they are all sent) over 20 s: every stage is busy when the
			// network goes, soon after the first deliveries.
			msgs := newTimeouts(count, r.dest, time.Now().Add(6*time.Second), 20*time.Second)
			sending := r.send(t, msgs)
			require.True(t, r.got.waitDistinct(count/40, 2*time.Minute), "the first delivered before the fault")
			inFlight := count - r.got.distinct()

			silent := time.Now()
			r.blackHole(t, target)
			line, raised := r.svc.waitLog(criticalLogged, outer)
			detect := line.at.Sub(silent)
			code, exitedAt, exited := -1, time.Time{}, false
			if raised {
				code, exitedAt, exited = exitWithin(r.svc, time.Minute)
			}
			deliveredBefore := r.got.distinct()
			breaker := ""
			if m := breakerName.FindStringSubmatch(line.text); m != nil {
				breaker = m[1]
			}
			// Each breaker whose stage went without an answer for the wait raises its own
			// critical error; those that arm together trip together.
			var criticals []string
			r.svc.mu.Lock()
			for _, l := range r.svc.lines {
				if strings.Contains(l.text, criticalLogged) {
					name := "?"
					if m := breakerName.FindStringSubmatch(l.text); m != nil {
						name = m[1]
					}
					criticals = append(criticals, name)
				}
			}
			r.svc.mu.Unlock()
			r.svc.kill() // when it did not stop by itself

			// The network comes back, and so does the service, as a supervisor would restart it.
			r.heal(t)
			restarted := time.Now()
			second := startService(t, "bh-"+target.name+"-2", r.args...)
			f, all := r.settle(t, msgs, 3*time.Minute)
			allAt := time.Now()
			early := r.got.early(msgs)

			outcome := "no critical error within " + outer.String()
			if raised {
				outcome = "critical error " + detect.Round(time.Millisecond).String() + " after the silence began (promise: within " +
					bound.String() + ") from the " + breaker + " breaker"
			}
			exit := "did not exit within a minute of it"
			if exited {
				exit = "exited " + exitedAt.Sub(line.at).Round(time.Millisecond).String() + " after it with code " + strconv.Itoa(code)
			}
			panics := r.svc.count("panic:")
			faultLog(t, "black hole on %s for good, outage wait %s, %d timeouts in flight (sent in %s): %s; critical errors logged from the breakers %v; process %s (panics: %d); "+
				"%d of %d delivered before; after the network and a new process were back: %s early=%d (error queue %d), all delivered %s after the restart",
				target.what, wait, inFlight, sending.Round(time.Millisecond), outcome, criticals, exit, panics, deliveredBefore, count,
				f, early, r.errs.distinct(), allAt.Sub(restarted).Round(time.Millisecond))

			require.GreaterOrEqual(t, inFlight, 1000, "the fault comes with 1,000 or more timeouts in flight")
			require.True(t, raised, "a critical error is raised:\n%s", r.svc.tail(30))
			require.LessOrEqual(t, detect, bound, "raised within the outage wait plus 2 s")
			require.GreaterOrEqual(t, detect, wait-time.Second, "not before the wait")
			for _, b := range criticals {
				require.Contains(t, target.messages, breakerMessages[b], "every critical error comes from a stage that calls %s: %v", target.what, criticals)
			}
			require.Contains(t, target.messages, breakerMessages[breaker], "a breaker of a stage that calls %s: %s", target.what, line.text)
			require.Contains(t, line.text, breakerMessages[breaker], "the breaker's documented text")
			require.True(t, exited, "the endpoint stops:\n%s", r.svc.tail(30))
			require.NotEqual(t, 0, code, "the process exits non-zero")
			require.Zero(t, panics, "it stops for the critical error, not in a panic:\n%s", r.svc.tail(40))
			last, ok := r.svc.waitLog("timeoutmill: critical error", time.Second)
			require.True(t, ok, "the exit says why:\n%s", r.svc.tail(10))
			said := false
			for _, b := range criticals {
				said = said || strings.Contains(last.text, breakerMessages[b])
			}
			require.True(t, said, "the exit names a critical error raised: %s", last.text)

			require.True(t, all, "all delivered after the restart (%d of %d)", r.got.distinct(), count)
			requireNoneLost(t, f)
			require.Zero(t, early, "none early")
			require.Zero(t, r.errs.distinct(), "a network fault sends nothing to the error queue")
			require.Zero(t, second.count(criticalLogged))
			r.stop(t, second)
		})
	}
}

// TestFaultNetworkSilenceShorterThanTheWait drops every packet to and from the store, the broker
// or both for 12 s under load, with a 30 s outage wait: no critical error, none lost, none early,
// and everything due by the end of the silence delivered within 5 s of it.
func TestFaultNetworkSilenceShorterThanTheWait(t *testing.T) {
	t.Parallel()
	for _, target := range []networkTarget{onStore, onBroker, onBoth} {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			const (
				count   = 2000
				silence = 12 * time.Second
				catchUp = 5 * time.Second
			)
			r := newNetworkRig(t, "sil-"+target.name, "--outage-wait", "30s")
			// Due from 6 s on (after they are all sent) over 20 s: the silence falls on every
			// stage, and timeouts fall due all through it.
			msgs := newTimeouts(count, r.dest, time.Now().Add(6*time.Second), 20*time.Second)
			sending := r.send(t, msgs)
			require.True(t, r.got.waitDistinct(count/40, 2*time.Minute), "the first delivered before the fault")
			inFlight := count - r.got.distinct()

			silent := time.Now()
			r.blackHole(t, target)
			deliveredBefore := r.got.distinct()
			time.Sleep(silence - time.Since(silent))
			r.heal(t)
			back := time.Now()
			deliveredDuring := r.got.distinct() - deliveredBefore

			var dueBy []timeoutMsg
			for _, m := range msgs {
				if !m.due.After(back) {
					dueBy = append(dueBy, m)
				}
			}
			f, all := r.settle(t, msgs, 2*time.Minute)
			last, tooLate, missing := r.got.lastArrival(dueBy, back.Add(catchUp))
			caughtUp := last.Sub(back)
			early := r.got.early(msgs)
			worst, _ := r.got.lateness(msgs, 0)

			faultLog(t, "black hole on %s for %s, outage wait 30s, %d timeouts in flight (sent in %s): %s early=%d (error queue %d); "+
				"%d delivered during the silence; the %d due by its end all delivered %s after it (%d later than %s, %d missing); latest delivery %s after due; "+
				"critical errors: %d; failures logged: %d",
				target.what, back.Sub(silent).Round(time.Millisecond), inFlight, sending.Round(time.Millisecond), f, early, r.errs.distinct(),
				deliveredDuring, len(dueBy), caughtUp.Round(time.Millisecond), tooLate, catchUp, missing, worst.Round(time.Millisecond),
				r.svc.count(criticalLogged), r.svc.count("level=ERROR"))

			require.GreaterOrEqual(t, inFlight, 1000, "the fault comes with 1,000 or more timeouts in flight")
			require.Zero(t, r.svc.count(criticalLogged), "no critical error for a silence shorter than the wait:\n%s", r.svc.tail(20))
			require.True(t, r.svc.running(), "the service rides the silence out:\n%s", r.svc.tail(20))
			require.True(t, all, "all delivered (%d of %d)", r.got.distinct(), count)
			requireNoneLost(t, f)
			require.Zero(t, early, "none early")
			require.Zero(t, r.errs.distinct(), "a network fault sends nothing to the error queue")
			require.Zero(t, missing)
			require.LessOrEqual(t, caughtUp, catchUp, "everything due during the silence delivered within %s of its end", catchUp)
			r.stop(t, r.svc)
		})
	}
}

// TestFaultNetworkLatency delays every reply of the store, or of the broker, by 200 ms ± 50 while
// timeouts fall due: none lost, none early, and each late by a few round trips, not by a queue
// that piles up.
func TestFaultNetworkLatency(t *testing.T) {
	t.Parallel()
	for _, target := range []networkTarget{onStore, onBroker} {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			const (
				count   = 1500
				latency = 200 * time.Millisecond
				jitter  = 50 * time.Millisecond
				// pileUp is far beyond a few round trips: a service that queued its calls
				// behind one another would pass it.
				pileUp = 10 * time.Second
			)
			r := newNetworkRig(t, "lat-"+target.name, "--outage-wait", "30s")
			// Latency while the timeouts fall due, not while the service sets up: a first start
			// creates the table, its indexes and its counts, dozens of round trips that would
			// each pay the latency and delay every timeout due before the poller is ready.
			_, ok := r.svc.waitLog(`Gave back the claims an earlier run of this instance left`, 90*time.Second)
			require.True(t, ok, "the poller ready:\n%s", r.svc.tail(20))
			// Every timeout is stored, claimed and dispatched through the slow network.
			r.poison(t, target, "latency", toxiproxy.Attributes{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()}, "downstream")
			msgs := newTimeouts(count, r.dest, time.Now().Add(3*time.Second), 10*time.Second)
			sending := r.send(t, msgs)
			f, all := r.settle(t, msgs, 3*time.Minute)
			early := r.got.early(msgs)
			q := r.got.latenessQuantiles(msgs, 0.5, 0.99, 1)

			faultLog(t, "latency %s ± %s on every reply of %s, all %d timeouts through it (sent in %s): %s early=%d (error queue %d); "+
				"lateness p50 %s p99 %s max %s; critical errors: %d; failures logged: %d",
				latency, jitter, target.what, count, sending.Round(time.Millisecond), f, early, r.errs.distinct(), q[0], q[1], q[2],
				r.svc.count(criticalLogged), r.svc.count("level=ERROR"))

			require.True(t, all, "all delivered (%d of %d)", r.got.distinct(), count)
			requireNoneLost(t, f)
			require.Zero(t, early, "none early")
			require.Zero(t, r.errs.distinct(), "latency sends nothing to the error queue")
			require.Zero(t, r.svc.count(criticalLogged), "latency is no critical error:\n%s", r.svc.tail(20))
			require.Less(t, q[1], pileUp, "late by round trips, not by a pile-up")
			r.stop(t, r.svc)
		})
	}
}

// TestFaultNetworkDisruptions resets connections while timeouts are forwarded and while they are
// stored, slices every packet into small pieces, and throttles the store's and the broker's
// connections to 64 KB/s, each under load: none lost, none early, and any duplicates (a reset
// that takes the broker's confirm or the database's reply with it) only of timeouts in flight when
// the fault began, and no more than those.
func TestFaultNetworkDisruptions(t *testing.T) {
	t.Parallel()
	// Each case sends count timeouts and puts its fault on; it returns them, what was in flight
	// when the fault began, and the fault's description.
	cases := []struct {
		name, tag string
		run       func(t *testing.T, r *networkRig, count int) ([]timeoutMsg, inFlight, string)
	}{
		{"reset_peer mid-forward", "rst-fwd", func(t *testing.T, r *networkRig, count int) ([]timeoutMsg, inFlight, string) {
			// All due within 2 s, once they are all sent: the resets fall while forwards are in
			// flight.
			due := time.Now().Add(6 * time.Second)
			msgs := newTimeouts(count, r.dest, due, 2*time.Second)
			r.send(t, msgs)
			time.Sleep(time.Until(due.Add(300 * time.Millisecond)))
			in := r.inFlightNow(t)
			r.poison(t, onBroker, "reset_peer", toxiproxy.Attributes{"timeout": 0}, "downstream")
			time.Sleep(2 * time.Second)
			r.heal(t)
			return msgs, in, "every broker connection reset at its next reply for 2 s, 300 ms into a burst of forwards"
		}},
		{"reset_peer mid-store", "rst-store", func(t *testing.T, r *networkRig, count int) ([]timeoutMsg, inFlight, string) {
			msgs := newTimeouts(count, r.dest, time.Now().Add(8*time.Second), 2*time.Second)
			sent := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				_, err := r.client.send(ctx, wire.TimeoutsQueue(r.e.endpoint), msgs)
				sent <- err
			}()
			time.Sleep(300 * time.Millisecond)
			in := r.inFlightNow(t)
			r.poison(t, onStore, "reset_peer", toxiproxy.Attributes{"timeout": 0}, "downstream")
			time.Sleep(2 * time.Second)
			r.heal(t)
			require.NoError(t, <-sent)
			return msgs, in, "every store connection reset at its next reply for 2 s, 300 ms into sending the timeouts"
		}},
		{"slicer", "slicer", func(t *testing.T, r *networkRig, count int) ([]timeoutMsg, inFlight, string) {
			in := r.inFlightNow(t)
			r.poison(t, onBoth, "slicer", toxiproxy.Attributes{"average_size": 64, "size_variation": 32, "delay": 100}, "upstream", "downstream")
			msgs := newTimeouts(count, r.dest, time.Now().Add(3*time.Second), 10*time.Second)
			r.send(t, msgs)
			return msgs, in, "every packet to and from the store and the broker sliced into 32-96 bytes, 100 µs apart"
		}},
		{"bandwidth", "bw", func(t *testing.T, r *networkRig, count int) ([]timeoutMsg, inFlight, string) {
			in := r.inFlightNow(t)
			r.poison(t, onBoth, "bandwidth", toxiproxy.Attributes{"rate": 64}, "upstream", "downstream")
			msgs := newTimeouts(count, r.dest, time.Now().Add(3*time.Second), 10*time.Second)
			r.send(t, msgs)
			return msgs, in, "the store's and the broker's connections throttled to 64 KB/s either way"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const count = 1500
			r := newNetworkRig(t, c.tag, "--outage-wait", "30s")
			msgs, in, fault := c.run(t, r, count)
			f, all := r.settle(t, msgs, 3*time.Minute)
			inFlight := in.ids(r.got, msgs)
			early := r.got.early(msgs)
			q := r.got.latenessQuantiles(msgs, 0.5, 0.99, 1)

			faultLog(t, "%s, %d timeouts in flight: %s early=%d (error queue %d); duplicates: %d extra deliveries of %d ids, bound %d; "+
				"lateness p50 %s p99 %s max %s; critical errors: %d; failures logged: %d",
				fault, len(inFlight), f, early, r.errs.distinct(), f.duplicated, len(f.duplicatedIDs), len(inFlight), q[0], q[1], q[2],
				r.svc.count(criticalLogged), r.svc.count("level=ERROR"))

			require.GreaterOrEqual(t, len(inFlight), 1000, "1,000 or more timeouts in flight")
			require.True(t, all, "all delivered (%d of %d)", r.got.distinct(), count)
			requireNoneLost(t, f)
			require.Zero(t, early, "none early")
			requireDuplicatesBounded(t, f, inFlight)
			require.Zero(t, r.errs.distinct(), "a network fault sends nothing to the error queue")
			require.Zero(t, r.svc.count(criticalLogged), "no critical error:\n%s", r.svc.tail(20))
			r.stop(t, r.svc)
		})
	}
}
