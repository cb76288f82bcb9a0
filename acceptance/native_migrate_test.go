package acceptance

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativemigrate"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// seedTimeouts stores n timeouts for dest in store, the i-th due at due(i), from several
// goroutines (one commit per timeout).
func seedTimeouts(t *testing.T, store persistence.Store, n int, dest string, due func(i int) time.Time) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := store.Store(context.Background(), persistence.Timeout{
					ID: fmt.Sprintf("m-%05d", i), Destination: dest, Due: due(i),
					Payload: []byte(fmt.Sprintf("payload %d", i)), Metadata: map[string]string{"n": fmt.Sprint(i)},
				})
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	require.NoError(t, first)
}

func surveyOf(t *testing.T, store persistence.Store) persistence.Survey {
	t.Helper()
	sv, err := store.(persistence.Handover).Survey(context.Background(), persistence.MinDue)
	require.NoError(t, err)
	return sv
}

// Migrating 10,000 timeouts from PostgreSQL while the endpoint's timeout manager keeps running
// and dispatching the due ones: every message arrives exactly once.
func TestNativeMigrationWhileTheServiceRuns(t *testing.T) {
	t.Parallel()
	const n = 10000
	e := newNativeEnv(t)
	endpoint := e.prefix + ".orders"
	store := e.postgresStore(t, endpoint)
	dest := e.queue(t, "invoices")
	arrivals := e.receive(t, dest)
	start := time.Now()
	seedTimeouts(t, store, n, dest, func(i int) time.Time {
		return start.Add(-5*time.Second + time.Duration(i)*30*time.Second/n) // from 5 s ago to 25 s ahead
	})
	t.Logf("stored %d timeouts in %s", n, time.Since(start).Round(time.Millisecond))

	e.manager(t, endpoint, store) // the service, dispatching what is due meanwhile
	res, err := nativemigrate.Migrate(context.Background(), nativemigrate.MigrationConfig{
		Store: store, Publisher: e.pub, BatchSize: 250, Logger: testLogger(),
	})
	require.NoError(t, err)
	t.Logf("migrated %d in %s; the timeout manager dispatched the rest; %d found gone", res.Migrated, res.Elapsed.Round(time.Millisecond), res.AlreadyGone)
	require.Positive(t, res.Migrated)
	require.Empty(t, res.Unmigratable)

	// Generous: the timeout manager's share goes through the store and dispatcher queues, at the
	// pace of a machine running every other test too.
	if !arrivals.waitFor(n, 3*time.Minute) {
		sv := surveyOf(t, store)
		t.Fatalf("%d of %d arrived; the store still holds %d (%d hidden)", arrivals.distinct(), n, sv.Count, sv.Hidden)
	}
	time.Sleep(2 * time.Second) // room for a duplicate to show up
	require.Empty(t, arrivals.duplicates(), "none duplicated")
	require.Equal(t, n, arrivals.distinct(), "none lost")
	require.Eventually(t, func() bool { return surveyOf(t, store).Count == 0 }, nativeManagerLateBound, 100*time.Millisecond, "the store is empty")
}

// A migration killed halfway (kill -9 of the command) and run again completes: nothing is lost;
// only the batch in flight at the kill may arrive twice.
func TestNativeMigrationKilledHalfwayCompletesOnRerun(t *testing.T) {
	t.Parallel()
	const n, batch = 20000, 100
	bin := nativeBinary(t)
	e := newNativeEnv(t)
	endpoint := e.prefix + ".orders"
	dsn, store := e.commandStore(t, endpoint)
	dest := e.queue(t, "reminders")
	arrivals := e.receive(t, dest)
	start := time.Now()
	seedTimeouts(t, store, n, dest, func(i int) time.Time {
		return start.Add(20*time.Second + time.Duration(i)*10*time.Second/n)
	})

	args := []string{"--log-level", "error", "migrate", "--to", "rabbitmq-native", "--store", dsn, "--endpoint", endpoint,
		"--transport", e.url, "--delay-prefix", e.prefix, "--batch", fmt.Sprint(batch), "--workers", "1"}
	var out bytes.Buffer
	first := exec.Command(bin, args...)
	first.Stdout, first.Stderr = &out, &out
	require.NoError(t, first.Start())
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	for surveyOf(t, store).Count > n/2 {
		select {
		case err := <-exited:
			t.Fatalf("the migration ended before it was halfway (%v):\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.NoError(t, first.Process.Kill())
	<-exited
	killed := surveyOf(t, store)
	t.Logf("killed with %d timeouts left, %d of them hidden", killed.Count, killed.Hidden)

	rerun, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "%s", rerun)
	t.Logf("rerun:\n%s", rerun)
	if killed.Hidden > 0 {
		require.Contains(t, string(rerun), fmt.Sprintf("resuming:   %d hidden", killed.Hidden))
	}
	require.Zero(t, surveyOf(t, store).Count, "the rerun completes")

	arrivals.wait(t, n, 3*time.Minute)
	time.Sleep(2 * time.Second)
	dups := arrivals.duplicates()
	t.Logf("%d arrived twice (sent before the kill, not yet removed)", len(dups))
	require.LessOrEqual(t, len(dups), batch, "only the batch in flight at the kill may arrive twice")
	require.Equal(t, n, arrivals.distinct(), "none lost")
}
