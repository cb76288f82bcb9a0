package bench

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/wire"
)

// TestStreamTimerHopsDeliverWhenDue: the Redis Streams and NATS JetStream yardsticks publish a
// held message through their broker when it is due, with its body and headers, never early.
func TestStreamTimerHopsDeliverWhenDue(t *testing.T) {
	for _, tc := range []struct {
		sys System
		env func(t *testing.T) Env
	}{
		{streamTimerHop(redisBroker(), timerHopRedis), func(t *testing.T) Env { return Env{RedisURL: testenv.RedisURL(t)} }},
		{streamTimerHop(natsBroker(), timerHopNATS), func(t *testing.T) Env { return Env{NATSURL: testenv.NATSURL(t)} }},
	} {
		t.Run(tc.sys.Name, func(t *testing.T) {
			env := tc.env(t)
			env.TempDir, env.Logger = t.TempDir(), watermill.NopLogger{}
			require.Empty(t, tc.sys.missing(env))
			require.True(t, tc.sys.Reference, "a yardstick is not timeoutmill")
			dest := testenv.UniqueName(t, "tbhop")
			rig, err := tc.sys.Open(t.Context(), env, dest)
			require.NoError(t, err)
			defer func() { require.NoError(t, rig.Close()) }()

			msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
			msg.Metadata.Set("k", "v")
			due := time.Now().Add(time.Second)
			rig.Mark(msg, due)
			require.NotEmpty(t, msg.Metadata.Get(wire.HeaderExpire), "the rig reads the due time the way the timeout manager's users mark it")
			require.NoError(t, rig.Publish(dest, msg))
			select {
			case got := <-rig.Arrivals:
				arrived := time.Now()
				got.Ack()
				require.Equal(t, msg.UUID, got.UUID)
				require.Equal(t, "x", string(got.Payload))
				require.Equal(t, "v", got.Metadata.Get("k"))
				require.False(t, arrived.Before(due), "delivered %s before due", due.Sub(arrived))
			case <-time.After(30 * time.Second):
				t.Fatal("the message did not arrive within 30 s")
			}
		})
	}
}
