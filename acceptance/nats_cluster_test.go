package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The NATS cluster drill runs a NATS cluster of the test's own: three servers on loopback,
// started by `scripts/services.sh nats-cluster up` on a private state directory and ports, and
// stopped when the test ends. Every stream involved has three replicas, clients are given the
// three servers' URLs, and the server that leads the busiest of the test's streams is killed
// (SIGKILL, no clean shutdown) under load, then started again.

// natsCluster is a private three-server NATS cluster with JetStream.
type natsCluster struct {
	dir  string
	port int // server n listens for clients on port+n-1; routes and monitoring follow
	name string
}

// newNATSCluster starts a three-server cluster and stops it when t ends.
func newNATSCluster(t *testing.T) *natsCluster {
	t.Helper()
	newPrivateServers(t) // skips (or fails under CI) where private servers cannot run
	tag := randomHex(t, 4)
	c := &natsCluster{dir: "/tmp/timeoutmill-natscluster-" + tag, port: freePorts(t, 9, 0), name: "tmn" + tag}
	t.Cleanup(func() {
		if out, err := c.script("down"); err != nil {
			t.Logf("stopping the NATS cluster: %v\n%s", err, out)
		}
		_ = os.RemoveAll(c.dir)
	})
	start := time.Now()
	out, err := c.script("up")
	require.NoError(t, err, "services.sh nats-cluster up:\n%s", out)
	t.Logf("NATS cluster of 3 servers on ports %d-%d up in %s", c.port, c.port+2, time.Since(start).Round(time.Millisecond))
	return c
}

func (c *natsCluster) script(args ...string) ([]byte, error) {
	cmd := exec.Command("../scripts/services.sh", append([]string{"nats-cluster"}, args...)...)
	cmd.Env = append(os.Environ(),
		"TIMEOUTMILL_SERVICES_DIR="+c.dir,
		"TIMEOUTMILL_NATS_CLUSTER_PORT="+strconv.Itoa(c.port),
		"TIMEOUTMILL_NATS_CLUSTER_NAME="+c.name,
		"TIMEOUTMILL_INSTALL_DIR="+sharedInstallDir(),
	)
	return cmd.CombinedOutput()
}

// urls lists the three servers' URLs, separated by commas.
func (c *natsCluster) urls() string {
	var us []string
	for n := 1; n <= 3; n++ {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", c.port+n-1))
	}
	return strings.Join(us, ",")
}

// server is the number of the server named name (0 when none is).
func (c *natsCluster) server(name string) int {
	for n := 1; n <= 3; n++ {
		if name == fmt.Sprintf("%s-%d", c.name, n) {
			return n
		}
	}
	return 0
}

// killUntilCleanup kills server n with SIGKILL and makes sure it is started again before t ends,
// whatever happens meanwhile.
func (c *natsCluster) killUntilCleanup(t *testing.T, n int) (restart func() time.Duration) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, "nats-cluster", fmt.Sprintf("node%d", n), "nats.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	for deadline := time.Now().Add(30 * time.Second); processAlive(pid); {
		require.True(t, time.Now().Before(deadline), "server %d (pid %d) still runs 30 s after SIGKILL", n, pid)
		time.Sleep(50 * time.Millisecond)
	}
	var once sync.Once
	var took time.Duration
	restart = func() time.Duration {
		once.Do(func() {
			start := time.Now()
			if out, err := c.script("up", strconv.Itoa(n)); err != nil {
				t.Errorf("starting server %d again: %v\n%s", n, err, out)
				return
			}
			took = time.Since(start)
		})
		return took
	}
	t.Cleanup(func() { restart() })
	return restart
}

// serverOf is the server a client connection named name is connected to, asked of each
// server's monitoring port (the connection may be moving: asked for up to 30 s).
func (c *natsCluster) serverOf(t *testing.T, name string) int {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		for n := 1; n <= 3; n++ {
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=4096", c.port+6+n-1))
			if err != nil {
				continue
			}
			var connz struct {
				Connections []struct {
					Name string `json:"name"`
				} `json:"connections"`
			}
			err = json.NewDecoder(resp.Body).Decode(&connz)
			_ = resp.Body.Close()
			if err != nil {
				continue
			}
			for _, conn := range connz.Connections {
				if conn.Name == name {
					return n
				}
			}
		}
	}
	t.Fatalf("no server has a connection named %q", name)
	return 0
}

// processAlive: pid runs and is no zombie (a killed server reparented to init may stay one).
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z'
	}
	return true
}

// natsStreams are the JetStream streams of the test, asked through any server that answers.
type natsStreams struct {
	js jetstream.JetStream
}

func newNATSStreams(t *testing.T, urls string) *natsStreams {
	t.Helper()
	conn, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	js, err := jetstream.New(conn)
	require.NoError(t, err)
	return &natsStreams{js: js}
}

// info is the stream's info, retried for up to 30 s while its group elects a leader.
func (s *natsStreams) info(t *testing.T, name string) *jetstream.StreamInfo {
	t.Helper()
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err := s.js.Stream(ctx, name)
		if err == nil {
			info, err := stream.Info(ctx)
			cancel()
			if err == nil {
				return info
			}
			last = err
			continue
		}
		cancel()
		last = err
	}
	t.Fatalf("stream %s: %v", name, last)
	return nil
}

// busiestLeader returns the server that leads the stream most written to (its last sequence) of
// names, that stream, and what its leader leads of names.
func (s *natsStreams) busiestLeader(t *testing.T, c *natsCluster, names []string) (server int, busiest string, led []string) {
	t.Helper()
	var most uint64
	leaders := map[string]int{}
	for _, name := range names {
		info := s.info(t, name)
		require.NotNil(t, info.Cluster, "stream %s is clustered", name)
		leaders[name] = c.server(info.Cluster.Leader)
		require.NotZero(t, leaders[name], "stream %s is led by %q, a server of the cluster", name, info.Cluster.Leader)
		if busiest == "" || info.State.LastSeq > most {
			busiest, most = name, info.State.LastSeq
		}
	}
	for _, name := range names {
		if leaders[name] == leaders[busiest] {
			led = append(led, name)
		}
	}
	return leaders[busiest], busiest, led
}

// consumeNATS counts what arrives on the stream of subject (3 replicas, created here) with a
// durable consumer of its own, by Watermill UUID. A delivery JetStream marks as redelivered, of
// an id already counted, is this consumer's own redelivery (its ack did not reach the leader),
// not a second message, and is not counted twice.
func consumeNATS(t *testing.T, s *natsStreams, subject string) *tally {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: natstransport.StreamName(subject), Subjects: []string{subject}, Storage: jetstream.FileStorage, Replicas: 3,
	})
	require.NoError(t, err)
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "tally", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second, MaxDeliver: -1,
	})
	require.NoError(t, err)
	tl := &tally{queue: subject, counts: map[string]int{}, first: map[string]time.Time{}}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		redelivered := false
		if md, err := m.Metadata(); err == nil {
			redelivered = md.NumDelivered > 1
		}
		tl.arrived(m.Headers().Get("_watermill_message_uuid"), redelivered)
		_ = m.Ack()
	}, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {})) // missed heartbeats while a leader moves: it goes on
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	return tl
}

// arrived counts one delivery of id, as record does for AMQP.
func (tl *tally) arrived(id string, redelivered bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if redelivered && tl.counts[id] > 0 {
		return
	}
	now := time.Now()
	tl.total++
	tl.counts[id]++
	if tl.counts[id] == 1 {
		tl.first[id] = now
	}
	tl.last = now
}

// TestNATSClusterLeaderKilledUnderLoad runs `timeoutmill run` on a three-server NATS cluster
// (streams with three replicas, the three URLs) and a PostgreSQL store, with 2,000 timeouts in
// flight, and kills with SIGKILL the server that leads the busiest of the endpoint's streams,
// starting it again 10 s later. Nothing is lost, nothing arrives before it is due, nothing goes to
// the error queue and no critical error is raised; duplicates and the longest pause in deliveries
// are counted and logged. Then the server the service consumes through is killed: the service
// connects again to another server of its URL list and delivers what is sent afterwards.
func TestNATSClusterLeaderKilledUnderLoad(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	const count = 2000
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	c := newNATSCluster(t)
	streams := newNATSStreams(t, c.urls())
	endpoint := "natscl-" + randomHex(t, 4)
	dest, errorQueue := endpoint+".due", endpoint+".error"
	got := consumeNATS(t, streams, dest)
	svc := startService(t, "natscluster", runArgs(endpoint, dsn, c.urls(), errorQueue, "--stream-replicas", "3", "--close-timeout", "10s")...)

	// Durable names the producer's connections ("producer publisher"), apart from the service's.
	pub, _, err := natstransport.New(natstransport.Config{URL: c.urls(), Replicas: 3, Durable: "producer"}, testLogger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	producer, err := timeouts.NewPublisher(pub, endpoint)
	require.NoError(t, err)

	// 2,000 timeouts over 10 s, each due 8 to 13 s after it is sent: when the server is killed
	// most are stored and waiting, a few are still being sent, deliveries have begun, and some
	// are still due after the server is back.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	due := make(map[string]time.Time, count)
	var ids []string
	var dueMu sync.Mutex
	sent := make(chan error, 1)
	var resent int
	var longestPublish time.Duration
	start := time.Now()
	go func() {
		for i := range count {
			m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "timeout %d", i))
			at := time.Now().Add(8*time.Second + time.Duration(i%6)*time.Second)
			timeouts.DeliverAt(m, at)
			dueMu.Lock()
			due[m.UUID] = at
			ids = append(ids, m.UUID)
			dueMu.Unlock()
			began := time.Now()
			for producer.Publish(dest, m) != nil {
				resent++ // published again, so it may be stored twice: the store keeps one
				select {
				case <-ctx.Done():
					sent <- ctx.Err()
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
			longestPublish = max(longestPublish, time.Since(began))
			time.Sleep(time.Until(start.Add(time.Duration(i+1) * 5 * time.Millisecond)))
		}
		sent <- nil
	}()

	time.Sleep(9 * time.Second)
	names := []string{natstransport.StreamName(wire.TimeoutsQueue(endpoint)), natstransport.StreamName(wire.DispatcherQueue(endpoint)),
		natstransport.StreamName(dest), natstransport.StreamName(errorQueue)}
	for _, name := range names {
		require.Equal(t, 3, streams.info(t, name).Config.Replicas, "stream %s has three replicas", name)
	}
	server, busiest, led := streams.busiestLeader(t, c, names)
	before := got.distinct()
	killed := time.Now()
	restart := c.killUntilCleanup(t, server)
	time.Sleep(time.Until(killed.Add(10 * time.Second)))
	downDelivered := got.distinct()
	restartTook := restart()
	back := time.Now()
	require.NoError(t, <-sent)
	allDelivered := got.waitDistinct(count, 3*time.Minute)
	allAt, afterBack := time.Since(killed), time.Since(back)
	got.quiet(2*time.Second, 30*time.Second)

	// Drained: the store empty and the dispatcher's stream too, so no duplicate can still come.
	drainStart := time.Now()
	var stored int
	var queued uint64
	for deadline := drainStart.Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		stored = storedTimeouts(dsn, endpoint)
		queued = streams.info(t, names[1]).State.Msgs
		if stored == 0 && queued == 0 || time.Now().After(deadline) {
			break
		}
	}
	drained := time.Since(drainStart)
	// The server that was killed catches up with the busiest stream's leader.
	caughtUp := false
	for deadline := time.Now().Add(time.Minute); !caughtUp && time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		info := streams.info(t, busiest)
		for _, p := range info.Cluster.Replicas {
			caughtUp = caughtUp || c.server(p.Name) == server && p.Current
		}
		caughtUp = caughtUp || c.server(info.Cluster.Leader) == server
	}

	dueMu.Lock()
	f := got.figures(ids)
	early, latest := 0, time.Duration(0)
	for _, id := range ids {
		if at := got.firstArrival(id); !at.IsZero() {
			if at.Before(due[id]) {
				early++
			}
			latest = max(latest, at.Sub(due[id]))
		}
	}
	dueMu.Unlock()
	errored := streams.info(t, names[3]).State.Msgs
	pause := got.longestPause(killed)
	faultLog(t, "%s, early=%d (error queue %d); killed server %d, leader of %s (busiest) and of %v, with %d delivered; "+
		"%d delivered while it was down (10 s); publishes repeated: %d, longest publish %s; restarted in %s; "+
		"longest pause in deliveries from the kill on: %s; all delivered %s after the kill (%t), %s after the restart; latest %s after due; "+
		"store drained %s later (%d stored, %d in the dispatcher stream); restarted server current again: %t; "+
		"service reconnections: %d; critical errors: %d",
		f, early, errored, server, busiest, led, before, downDelivered, resent, longestPublish.Round(time.Millisecond),
		restartTook.Round(time.Millisecond), pause.Round(time.Millisecond), allAt.Round(time.Millisecond), allDelivered,
		afterBack.Round(time.Millisecond), latest.Round(time.Millisecond), drained.Round(time.Millisecond), stored, queued,
		caughtUp, svc.count("Connected again"), svc.count(criticalLogged))
	require.Less(t, before, count, "deliveries were left for after the kill")
	require.True(t, allDelivered, "all delivered (%d of %d)", got.distinct(), count)
	requireNoneLost(t, f)
	require.Zero(t, early, "none arrives before it is due")
	require.Zero(t, errored, "losing a server sends nothing to the error queue")
	require.Zero(t, svc.count(criticalLogged), "losing a server of three is no critical error:\n%s", svc.tail(30))
	require.True(t, stored == 0 && queued == 0, "the store (%d) and the dispatcher stream (%d) drained", stored, queued)
	require.True(t, caughtUp, "the restarted server caught up with stream %s", busiest)
	require.True(t, svc.running(), "the service survived:\n%s", svc.tail(20))

	// Then the server the service consumes through is killed (the leader was not necessarily
	// it): its connection moves to another server of the URL list, and what is sent afterwards
	// is delivered, never early.
	reconnected := svc.count("Connected again")
	consumer := c.serverOf(t, "timeoutmill subscriber")
	c.killUntilCleanup(t, consumer)
	const more = 200
	moreDue := map[string]time.Time{}
	var moreIDs []string
	for i := range more {
		m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "after %d", i))
		at := time.Now().Add(2 * time.Second)
		timeouts.DeliverAt(m, at)
		moreDue[m.UUID], moreIDs = at, append(moreIDs, m.UUID)
		for producer.Publish(dest, m) != nil {
			require.NoError(t, ctx.Err())
			time.Sleep(200 * time.Millisecond)
		}
	}
	require.True(t, got.waitDistinct(count+more, 2*time.Minute), "all delivered after the consumer's server was killed (%d of %d)", got.distinct(), count+more)
	fm := got.figures(append(ids, moreIDs...))
	requireNoneLost(t, fm)
	for _, id := range moreIDs {
		require.False(t, got.firstArrival(id).Before(moreDue[id]), "%s arrived early", id)
	}
	// The log line may reach the test a moment after the deliveries it made possible.
	for deadline := time.Now().Add(10 * time.Second); svc.count("Connected again") <= reconnected && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	faultLog(t, "then killed server %d, the service's subscriber's, and sent %d more: all %s; service reconnections %d",
		consumer, more, fm, svc.count("Connected again")-reconnected)
	require.Greater(t, svc.count("Connected again"), reconnected, "the service connected again to another server:\n%s", svc.tail(20))
	svc.signal(t, sigterm)
	code, _ := svc.wait(t, time.Minute)
	require.Equal(t, 0, code)
}
