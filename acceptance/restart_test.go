package acceptance

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
)

// restartCommandEnv names a shell command that restarts the RabbitMQ at TIMEOUTMILL_TEST_AMQP_URL
// and returns once it accepts connections again. `make test` does not set it: its broker is
// shared by every test running at the same time. Point the tests at a broker of your own to run
// TestBrokerRestart: for example a node named tmrestart@localhost on 127.0.0.1:5692, isolated as
// scripts/services.sh isolates its own and restarted with `rabbitmqctl stop` and rabbitmq-server.
const restartCommandEnv = "TIMEOUTMILL_TEST_RABBITMQ_RESTART"

// TestBrokerRestart restarts the broker under a running endpoint: a timeout due during the
// outage is delivered after it (its announcement failed, so once its claim's lease ran out), a
// timeout published after it is delivered on time, and no critical error is raised.
func TestBrokerRestart(t *testing.T) {
	command := os.Getenv(restartCommandEnv)
	if command == "" {
		t.Skip(restartCommandEnv + " is not set: it needs a broker of its own to restart (see restart_test.go)")
	}
	e := newEnv(t, "restart")
	n := startNode(t, e, "a", backends()[0].database(t, e.endpoint)(t), func(c *timeouts.Config) {
		c.ClaimLease = 5 * time.Second // an announcement lost in the outage is retried this soon
	})
	dest := e.queue("after")
	delivered := receive(t, e, dest)

	during := message.NewMessage(watermill.NewUUID(), []byte("due during the outage"))
	timeouts.DeliverAfter(during, 2*time.Second)
	require.NoError(t, n.manager.Publisher().Publish(dest, during))

	start := time.Now()
	out, err := exec.CommandContext(context.Background(), "sh", "-c", command).CombinedOutput()
	require.NoError(t, err, "%s: %s", command, out)
	t.Logf("the broker was restarted in %s", time.Since(start).Round(time.Millisecond))

	got := await(t, delivered, time.Minute)
	require.Equal(t, during.UUID, got.msg.UUID)
	t.Logf("the timeout due during the outage arrived %s after the restart finished", got.at.Sub(start).Round(time.Millisecond))

	after := message.NewMessage(watermill.NewUUID(), []byte("after"))
	timeouts.DeliverAfter(after, time.Second)
	require.Eventually(t, func() bool { return n.manager.Publisher().Publish(dest, after) == nil }, time.Minute, 200*time.Millisecond)
	require.Equal(t, after.UUID, await(t, delivered, lateBound).msg.UUID)
	require.NoError(t, n.manager.Err())
}
