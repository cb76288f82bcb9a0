package acceptance

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
)

// TestServiceRecoversWhenTheBrokerDropsItsConnections closes every connection of the endpoint
// from the broker's side (rabbitmqctl close_connection), as a broker restart does, while a
// timeout is pending; the endpoint reconnects by itself, delivers it when due, and goes on
// delivering new ones. The broker itself is not restarted: every other test shares it.
func TestServiceRecoversWhenTheBrokerDropsItsConnections(t *testing.T) {
	t.Parallel()
	ctl := rabbitmqctl(t)
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, "reconnect")
		n := startNode(t, e, "a", b.database(t, e.endpoint)(t), nil)
		dest := e.queue("after")
		delivered := receive(t, e, dest)

		pendingMsg := message.NewMessage(watermill.NewUUID(), []byte("survives the outage"))
		due := time.Now().Add(10 * time.Second)
		timeouts.DeliverAt(pendingMsg, due)
		require.NoError(t, n.manager.Publisher().Publish(dest, pendingMsg))

		// The node's publisher and subscriber, and the receiver: every connection of this test.
		closed := closeConnections(t, ctl, e.endpoint, 3)
		if left := time.Until(due); left > 0 {
			t.Logf("%s: closed %d connections %s before the timeout is due", b.name, closed, left.Round(time.Millisecond))
		} else {
			t.Logf("%s: closing %d connections took until %s after the timeout was due (a busy machine): only the "+
				"messages sent after the outage show the recovery", b.name, closed, (-left).Round(time.Millisecond))
		}

		got := await(t, delivered, untilDue(due)+stallBound)
		require.Equal(t, pendingMsg.UUID, got.msg.UUID)
		require.False(t, got.at.Before(due))
		t.Logf("%s: the pending timeout was delivered %s after due", b.name, got.at.Sub(due).Round(time.Millisecond))

		next := message.NewMessage(watermill.NewUUID(), []byte("after the outage"))
		timeouts.DeliverAfter(next, 500*time.Millisecond)
		require.Eventually(t, func() bool { return n.manager.Publisher().Publish(dest, next) == nil }, 30*time.Second, 100*time.Millisecond)
		require.Equal(t, next.UUID, await(t, delivered, lateBound).msg.UUID)
	})
}

type ctlCommand func(args ...string) ([]byte, error)

// rabbitmqctl returns a runner of the test node's rabbitmqctl, which the env file of
// scripts/services.sh names.
func rabbitmqctl(t *testing.T) ctlCommand {
	t.Helper()
	path := os.Getenv("TIMEOUTMILL_RABBITMQCTL")
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("TIMEOUTMILL_RABBITMQCTL is not set although CI is: source the env file of scripts/services.sh")
		}
		t.Skip("TIMEOUTMILL_RABBITMQCTL is not set: source the env file of scripts/services.sh to run")
	}
	return func(args ...string) ([]byte, error) {
		return exec.Command(path, args...).CombinedOutput()
	}
}

// closeConnections waits until the broker lists at least want connections whose name starts with
// prefix (they register a moment after they open), closes them, and returns how many it closed.
func closeConnections(t *testing.T, ctl ctlCommand, prefix string, want int) int {
	t.Helper()
	var pids []string
	require.Eventually(t, func() bool {
		// One line per connection: its pid (in the form close_connection takes; the JSON
		// formatter prints another), a tab, and its client properties as Erlang terms.
		out, err := ctl("-q", "list_connections", "--no-table-headers", "pid", "client_properties")
		require.NoError(t, err, "%s", out)
		pids = pids[:0]
		for _, line := range strings.Split(string(out), "\n") {
			pid, props, ok := strings.Cut(line, "\t")
			if ok && strings.Contains(props, `{"connection_name","`+prefix) {
				pids = append(pids, pid)
			}
		}
		return len(pids) >= want
	}, 20*time.Second, 200*time.Millisecond)
	// At once: each rabbitmqctl run starts an Erlang VM, seconds apiece on a busy machine.
	errs := make(chan error, len(pids))
	for _, pid := range pids {
		go func() {
			out, err := ctl("close_connection", pid, "timeoutmill acceptance test: simulated broker restart")
			if err != nil {
				err = fmt.Errorf("close_connection %s: %w: %s", pid, err, out)
			}
			errs <- err
		}()
	}
	for range pids {
		require.NoError(t, <-errs)
	}
	return len(pids)
}
