package acceptance

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// dispatchBreakerWait is the dispatch circuit breaker's wait in `timeoutmill run`
// (TimeToTriggerDispatchCircuitBreaker's default): before parking existed, a message refused
// by its destination and by the error queue stopped the service with a critical error after it.
const dispatchBreakerWait = 30 * time.Second

// TestFaultUnforwardableMessageIsParked stores a 64 MiB message due now among 100 ordinary ones
// for a running `timeoutmill run` on the shared RabbitMQ (which refuses messages over 16 MiB,
// max_message_size) and a PostgreSQL store. The big one is written to the store directly: no
// broker would carry it to the Timeouts queue, but Manager.Schedule, ScheduleTx or a store
// shared with a producer can hold it. The service is the one operators run, so the CLI commands
// act on what it parked. The 100 are delivered; the big one ends parked with the broker's
// refusal as its reason, acked, without a critical error, and the service goes on delivering
// past the dispatch breaker's wait; `parked list` shows it, `parked replay` puts it back (it
// parks again: the broker still refuses it), `parked delete` removes it.
func TestFaultUnforwardableMessageIsParked(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	e := newEnv(t, "parked")
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	dest := e.queue("due")
	// One retry: the first refusal is a counted attempt that arms the dispatch breaker; the
	// parking must end it.
	svc := startService(t, "parked", runArgs(e.endpoint, dsn, e.url, e.errorQueue,
		"--poll-interval", "1s", "--number-of-retries", "1", "--close-timeout", "10s")...)
	client := newBrokerClient(t, e.url)
	got := client.consume(t, dest)
	errs := client.consume(t, e.errorQueue)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The service sets its table up once its router runs, a moment after it logs Running.
	var (
		store persistence.Store
		err   error
	)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		store, err = connect.OpenExistingStore(ctx, dsn, e.endpoint)
		if err == nil || !errors.Is(err, persistence.ErrNotSetUp) || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, "the service sets its table up")
	t.Cleanup(func() { _ = store.Close() })

	big := make([]byte, 64<<20)
	_, err = rand.Read(big)
	require.NoError(t, err)
	bigID := "big-" + watermill.NewUUID()
	now := time.Now()
	ordinary := make([]persistence.Timeout, 100)
	sent := make([]string, len(ordinary))
	for i := range ordinary {
		sent[i] = watermill.NewUUID()
		ordinary[i] = persistence.Timeout{ID: sent[i], Destination: dest, Due: now, Payload: fmt.Appendf(nil, "ordinary %d", i)}
	}
	// The big one among the others, in one batch: the dispatcher meets them together.
	batch := append(append(append([]persistence.Timeout(nil), ordinary[:50]...),
		persistence.Timeout{ID: bigID, Destination: dest, Due: now, Payload: big}), ordinary[50:]...)
	_, err = store.(persistence.BatchStore).StoreMany(ctx, batch)
	require.NoError(t, err)
	stored := time.Now() // due since before: the service finds them at its next look, within 1 s

	require.True(t, got.waitDistinct(len(sent), 2*time.Minute), "the 100 ordinary ones are delivered: %s", got.figures(sent))
	parked := waitParked(t, store, bigID, 2*time.Minute)
	timeToPark := time.Since(stored)
	require.Contains(t, parked.Parked, fmt.Sprintf("forwarding to %q failed after 2 attempts", dest))
	require.Contains(t, parked.Parked, "PRECONDITION_FAILED", "the broker's refusal is named")
	require.Contains(t, parked.Parked, "larger than configured max size")
	require.Contains(t, parked.Parked, fmt.Sprintf("the error queue %q refused its copy too", e.errorQueue))
	f := got.figures(sent)
	// Those published before the big one in a refused batch are published again alone:
	// duplicates, at least once, never a loss.
	requireNoneLost(t, f)
	require.Zero(t, errs.distinct(), "nothing reached the error queue")
	parkedAt := time.Now()

	// parked list shows it, as a table and as JSON.
	out := runCLI(t, "parked", "list", "--endpoint", e.endpoint, "--store", dsn)
	require.Contains(t, out, bigID)
	require.Contains(t, out, "PRECONDITION_FAILED")
	var listed struct {
		Timeouts []struct {
			ID           string `json:"id"`
			Destination  string `json:"destination"`
			FailureCount int    `json:"failure_count"`
			Reason       string `json:"reason"`
		} `json:"timeouts"`
	}
	require.NoError(t, json.Unmarshal([]byte(runCLI(t, "parked", "list", "--json", "--endpoint", e.endpoint, "--store", dsn)), &listed))
	require.Len(t, listed.Timeouts, 1)
	require.Equal(t, bigID, listed.Timeouts[0].ID)
	require.Equal(t, dest, listed.Timeouts[0].Destination)
	require.Equal(t, 2, listed.Timeouts[0].FailureCount)
	require.Equal(t, parked.Parked, listed.Timeouts[0].Reason)
	require.Contains(t, runCLI(t, "stats", "--endpoint", e.endpoint, "--store", dsn), "parked:       1")

	// Replayed, it is tried again from its first attempt, and parks again.
	require.Contains(t, runCLI(t, "parked", "replay", bigID, "--endpoint", e.endpoint, "--store", dsn), "replayed "+bigID)
	require.Eventually(t, func() bool { return svc.count("Timeout parked") >= 2 }, 2*time.Minute, 100*time.Millisecond, "parked again")
	again := waitParked(t, store, bigID, time.Minute)
	require.Contains(t, again.Parked, "PRECONDITION_FAILED")

	// Past the dispatch breaker's wait since the last refusal, the service runs and delivers.
	time.Sleep(dispatchBreakerWait + 5*time.Second)
	require.True(t, svc.running(), "no critical error stopped the service:\n%s", svc.tail(40))
	later := make([]persistence.Timeout, 10)
	laterIDs := make([]string, len(later))
	for i := range later {
		laterIDs[i] = watermill.NewUUID()
		later[i] = persistence.Timeout{ID: laterIDs[i], Destination: dest, Due: time.Now(), Payload: []byte("after the parking")}
	}
	_, err = store.(persistence.BatchStore).StoreMany(ctx, later)
	require.NoError(t, err)
	require.True(t, got.waitDistinct(len(sent)+len(later), time.Minute), "the endpoint still delivers: %s", got.figures(laterIDs))

	// Delete takes parked timeouts only.
	out = runCLIExit(t, 1, "parked", "delete", laterIDs[0], bigID, "--endpoint", e.endpoint, "--store", dsn)
	require.Contains(t, out, "deleted "+bigID)
	require.Contains(t, out, "not parked, not deleted: "+laterIDs[0])
	_, err = store.Peek(ctx, bigID)
	require.ErrorIs(t, err, persistence.ErrNotFound)
	require.True(t, svc.running(), "no critical error stopped the service")
	require.Zero(t, errs.distinct())
	t.Logf("parked: sent=%d (+1 of 64 MiB) delivered=%d lost=%d duplicated=%d parked=1 (twice, after its replay) time to park=%s; ran %s past the parking without a critical error",
		f.sent, f.delivered, f.lost, f.duplicated, timeToPark.Round(time.Millisecond), time.Since(parkedAt).Round(time.Second))
}

// waitParked waits up to within for the timeout with that id to be parked, and returns it.
func waitParked(t *testing.T, store persistence.Store, id string, within time.Duration) persistence.Timeout {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := store.Peek(context.Background(), id)
		require.NoError(t, err, "the timeout is kept")
		if got.Parked != "" {
			return got
		}
		require.True(t, time.Now().Before(deadline), "timeout %s not parked within %s", id, within)
		time.Sleep(100 * time.Millisecond)
	}
}

// runCLI runs a timeoutmill command to its end, requires exit code 0, and returns its output.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	return runCLIExit(t, 0, args...)
}

// runCLIExit runs a timeoutmill command to its end, requires exit code code, and returns its
// output.
func runCLIExit(t *testing.T, code int, args ...string) string {
	t.Helper()
	s := runCommand(t, strings.Join(args[:2], " "), args...)
	got, _ := s.wait(t, time.Minute)
	require.Equal(t, code, got, "timeoutmill %s:\n%s", strings.Join(args, " "), s.output())
	return s.output()
}
