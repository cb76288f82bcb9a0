package nativedelay

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// TestASendOnAClosedChannelReturnsItsError: once its channel is closed, a send reports every
// message as not confirmed and returns. amqp091 closes a channel's return notifications with the
// channel, and reading them as if open spins forever at full CPU (as when the broker connection
// closes under a probe).
func TestASendOnAClosedChannelReturnsItsError(t *testing.T) {
	t.Parallel()
	conn, err := amqp.Dial(testenv.AMQPURL(t))
	require.NoError(t, err)
	defer conn.Close()
	s, err := NewSender(conn)
	require.NoError(t, err)
	s.Close()

	done := make(chan struct{})
	var results []error
	go func() {
		defer close(done)
		results, err = s.Send(context.Background(), []Outgoing{{Exchange: "", Key: "nowhere", Msg: amqp.Publishing{Body: []byte("x")}}})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("send on a closed channel did not return")
	}
	require.Error(t, err)
	require.Len(t, results, 1)
	require.ErrorIs(t, results[0], ErrNotConfirmed)
}
