package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
)

func TestSetupIsIdempotentAndVerifyPasses(t *testing.T) {
	t.Parallel()
	for _, qt := range []rabbitmq.QueueType{rabbitmq.Quorum, rabbitmq.Classic} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			b := newBroker(t, qt)
			b.setup(t)
			b.setup(t)
			start := time.Now()
			require.NoError(t, b.topo.Verify(context.Background(), b.conn))
			t.Logf("verify took %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestVerifyPassesWithTheLongestPrefix: verify's probes route to the probe queue whatever the
// prefix's length.
func TestVerifyPassesWithTheLongestPrefix(t *testing.T) {
	t.Parallel()
	b := newBroker(t, rabbitmq.Classic)
	topo, err := nativedelay.NewTopology(b.topo.Prefix()+"-"+strings.Repeat("p", 186-len(b.topo.Prefix())-1), rabbitmq.Classic)
	require.NoError(t, err)
	b.topo = topo // deleted by newBroker's cleanup
	b.setup(t)
	require.NoError(t, b.topo.Verify(context.Background(), b.conn))
}

func TestVerifyNamesEachMissingOrWrongPiece(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	ch := b.channel(t)
	_, err := ch.QueueDelete(b.topo.Queue(3), false, false, false)
	require.NoError(t, err)
	require.NoError(t, ch.QueueUnbind(b.topo.Queue(7), nativedelay.QueueBindingKey(7), b.topo.Exchange(7), nil))
	require.NoError(t, ch.ExchangeUnbind(b.topo.Exchange(11), nativedelay.NextBindingKey(12), b.topo.Exchange(12), false, nil))
	require.NoError(t, ch.ExchangeUnbind(b.topo.DeliveryExchange(), nativedelay.NextBindingKey(0), b.topo.Exchange(0), false, nil))
	require.NoError(t, ch.ExchangeDelete(b.topo.Exchange(20), false, false))

	err = b.topo.Verify(ctx, b.conn)
	require.ErrorIs(t, err, rabbitmq.ErrTopology)
	var verr *nativedelay.VerifyError
	require.True(t, errors.As(err, &verr))
	var got []string
	for _, p := range verr.Problems {
		got = append(got, p.String())
	}
	t.Logf("%s", err)
	prefix := b.topo.Prefix()
	require.Contains(t, got, "queue "+prefix+".delay-level-03 is missing")
	require.Contains(t, got, "exchange "+prefix+".delay-level-20 is missing")
	require.Contains(t, err.Error(), "binding of queue "+prefix+".delay-level-07 to exchange "+prefix+".delay-level-07 on "+nativedelay.QueueBindingKey(7)+" is missing")
	require.Contains(t, err.Error(), "binding of exchange "+prefix+".delay-level-11 to exchange "+prefix+".delay-level-12 on "+nativedelay.NextBindingKey(12)+" is missing")
	require.Contains(t, err.Error(), "binding of exchange "+prefix+".delay-delivery to exchange "+prefix+".delay-level-00 on "+nativedelay.NextBindingKey(0)+" is missing")
	require.Len(t, verr.Problems, 5, "only the pieces broken, nothing they made unverifiable: %s", err)

	b.setup(t)
	require.NoError(t, b.topo.Verify(ctx, b.conn), "setup repairs what was missing")
}

func TestVerifyNamesAQueueWithOtherArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	ch := b.channel(t)
	_, err := ch.QueueDelete(b.topo.Queue(5), false, false, false)
	require.NoError(t, err)
	args := b.topo.QueueArguments(5)
	args["x-message-ttl"] = int64(1000)
	_, err = ch.QueueDeclare(b.topo.Queue(5), true, false, false, false, args)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(b.topo.Queue(5), nativedelay.QueueBindingKey(5), b.topo.Exchange(5), false, nil))

	err = b.topo.Verify(ctx, b.conn)
	require.ErrorIs(t, err, rabbitmq.ErrTopology)
	require.ErrorContains(t, err, "queue "+b.topo.Prefix()+".delay-level-05 differs: inequivalent arg 'x-message-ttl'")
	require.ErrorContains(t, err, "received '32000' but current is '1000'")

	// A classic topology checked against quorum queues names the queue type.
	classic, err := nativedelay.NewTopology(b.topo.Prefix(), rabbitmq.Classic)
	require.NoError(t, err)
	err = classic.Verify(ctx, b.conn)
	require.ErrorContains(t, err, "queue "+b.topo.Prefix()+".delay-level-00 is a quorum queue, not classic (set up with the other queue type?)")
}
