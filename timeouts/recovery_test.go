package timeouts_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

func openSQLite(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	store, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Endpoint: endpoint})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// A poller that claimed ids and died before announcing them (or whose dispatcher messages were
// lost with a non-durable broker) leaves claims behind; they are delivered once the lease runs out.
func TestClaimLostInACrashIsRecoveredWhenItsLeaseRunsOut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	ctx := context.Background()

	crashed := openSQLite(t, path)
	_, err := crashed.Store(ctx, persistence.Timeout{
		ID: "lost-in-crash", Destination: "recovered", Due: time.Now().Add(-time.Second),
		Payload: []byte("still here"), Metadata: map[string]string{"k": "v"},
	})
	require.NoError(t, err)
	lease := 1500 * time.Millisecond
	claimedAt := time.Now()
	ids, err := crashed.ClaimDue(ctx, claimedAt, 10, lease)
	require.NoError(t, err)
	require.Equal(t, []string{"lost-in-crash"}, ids)
	require.NoError(t, crashed.Close()) // the process dies; nothing was announced

	b := setup(t, openSQLite(t, path), func(c *timeouts.Config) { c.ClaimLease = lease })
	delivered := subscribe(t, b.pubSub, "recovered")
	got := await(t, delivered, 10*time.Second)
	require.Equal(t, "lost-in-crash", got.msg.UUID)
	require.Equal(t, "still here", string(got.msg.Payload))
	require.Equal(t, "v", got.msg.Metadata.Get("k"))
	require.GreaterOrEqual(t, got.at.Sub(claimedAt), lease, "not handed out again while the lease runs")
	requireNothing(t, delivered, 500*time.Millisecond)
}

func TestPipelineOnSQLiteSurvivesRestartMidFlight(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")

	// Ids the first process claimed just before it stopped keep their lease: keep it short.
	first := setup(t, openSQLite(t, path), func(c *timeouts.Config) { c.ClaimLease = time.Second })
	beforeStop := subscribe(t, first.pubSub, "mid-flight")
	want := map[string]bool{}
	for i := range 50 {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		timeouts.DeliverAfter(msg, time.Duration(300+20*i)*time.Millisecond)
		require.NoError(t, first.manager.Publisher().Publish("mid-flight", msg))
		want[msg.UUID] = true
	}
	require.Eventually(t, func() bool { // all stored (some maybe delivered already)
		st, err := first.store.(persistence.Inspector).Stats(context.Background(), time.Now())
		return err == nil && st.Pending+len(beforeStop) == len(want)
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, first.router.Close()) // some due, most not yet
	<-first.manager.Done()
	require.NoError(t, first.store.Close())

	// Deliveries made before the stop, if the machine was slow, reach beforeStop within 100 ms.
	time.Sleep(100 * time.Millisecond)
	deliveredBefore := map[string]bool{}
	for len(beforeStop) > 0 {
		id := (<-beforeStop).msg.UUID
		deliveredBefore[id] = true
		delete(want, id)
	}

	// Every id not delivered yet arrives after the restart. A forward the stop overlapped may
	// arrive again: on a GoChannel, a Publish that returned while the router was closing cannot
	// tell a message its subscriber took from one the closing discarded, so its timeout is kept
	// (at least once). Nothing else arrives, and nothing arrives twice more.
	second := setup(t, openSQLite(t, path), func(c *timeouts.Config) { c.ClaimLease = time.Second })
	delivered := subscribe(t, second.pubSub, "mid-flight")
	again := map[string]bool{}
	check := func(id string) {
		switch {
		case want[id]:
			delete(want, id)
		case deliveredBefore[id] && !again[id]:
			again[id] = true
		default:
			t.Fatalf("unexpected or duplicate %s (delivered before the stop: %v)", id, deliveredBefore[id])
		}
	}
	for len(want) > 0 {
		check(await(t, delivered, 10*time.Second).msg.UUID)
	}
	for quiet := time.After(300 * time.Millisecond); ; {
		select {
		case a := <-delivered:
			check(a.msg.UUID)
			continue
		case <-quiet:
		}
		break
	}
	t.Logf("delivered before the stop: %d; after the restart: %d more and %d again", len(deliveredBefore), 50-len(deliveredBefore), len(again))
}
