package acceptance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// 100,000 timeouts move from PostgreSQL into NATS message schedules with `timeoutmill migrate
// --to nats-native`, killed (kill -9) halfway and run again: every timeout waits in exactly one
// schedule, since a schedule sent again replaces its own (one schedule subject per id), and the
// store ends empty.
func TestNATSNativeMigrationOf100000KilledHalfwayNeitherLosesNorDuplicates(t *testing.T) {
	t.Parallel()
	const n, batch = 100000, 1000
	natsURL := testenv.NATSURL(t)
	bin := nativeBinary(t)
	var r [6]byte
	_, _ = rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	stream, prefix, dest := "migrate_"+id, "migrate."+id, "reminders."+id
	endpoint := "natsmigrate_" + id
	var pg nativeEnv // its store helpers need no broker
	dsn, store := pg.commandStore(t, endpoint)

	conn, err := natsgo.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	js, err := jetstream.New(conn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	flags := []string{"--transport", natsURL, "--nats-stream", stream, "--nats-subject-prefix", prefix}
	out, err := exec.Command(bin, append([]string{"native", "setup"}, flags...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)

	start := time.Now()
	ts := make([]persistence.Timeout, 0, batch)
	due := start.Add(time.Hour) // firing is tested elsewhere; here, what waits in the stream
	for i := range n {
		ts = append(ts, persistence.Timeout{
			ID: fmt.Sprintf("m-%06d", i), Destination: dest, Due: due.Add(time.Duration(i) * 5 * time.Second / n),
			Payload: []byte(fmt.Sprintf("payload %d", i)), Metadata: map[string]string{"n": fmt.Sprint(i)},
		})
		if len(ts) == batch {
			_, err := store.StoreMany(context.Background(), ts)
			require.NoError(t, err)
			ts = ts[:0]
		}
	}
	t.Logf("stored %d timeouts in %s", n, time.Since(start).Round(time.Millisecond))

	args := append([]string{"--log-level", "error", "migrate", "--to", "nats-native", "--store", dsn, "--endpoint", endpoint,
		"--batch", fmt.Sprint(batch), "--workers", "4"}, flags...)
	var firstOut bytes.Buffer
	first := exec.Command(bin, args...)
	first.Stdout, first.Stderr = &firstOut, &firstOut
	require.NoError(t, first.Start())
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	for surveyOf(t, store).Count > n/2 {
		select {
		case err := <-exited:
			t.Fatalf("the migration ended before it was halfway (%v):\n%s", err, firstOut.String())
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
	require.Zero(t, surveyOf(t, store).Count, "the rerun completes")

	// Each timeout waits in exactly one schedule, on the subject of its id: none lost, and what
	// the killed run had sent and the rerun sent again replaced itself.
	s, err := js.Stream(context.Background(), stream)
	require.NoError(t, err)
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(prefix+".>"))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, n, "one schedule subject per timeout")
	for i := range n {
		subject := fmt.Sprintf("%s.m-%06d", prefix, i)
		require.Equal(t, uint64(1), info.State.Subjects[subject], "schedules of timeout %d", i)
	}
	require.Equal(t, uint64(n), info.State.Msgs, "no other message in the stream")
}
