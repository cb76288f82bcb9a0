package nats_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// 200 messages a second for 5 s, each due 1 to 5 s ahead at a random sub-second instant: none
// arrives early, by the receiver's clock or by the time the server stored it on the destination.
func TestScheduledAt200PerSecondNoneArrivesEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 12 s; run without -short")
	}
	s := newServer(t)
	pub := s.publisher(t, true)
	dest := "precision." + unique(t)
	require.NoError(t, pub.EnsureDestinations(context.Background(), dest))
	arrivals := s.consume(t, dest)

	const rate, total = 200, 1000
	due := map[string]time.Time{}
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for range total {
		<-tick.C
		msg := message.NewMessage(watermill.NewUUID(), nil)
		at := time.Now().Add(time.Second + time.Duration(rand.Int64N(int64(4*time.Second))))
		timeouts.DeliverAt(msg, at)
		due[msg.UUID] = at
		require.NoError(t, pub.Publish(dest, msg))
	}
	var early, storedEarly int
	var worst time.Duration
	for range total {
		a := next(t, arrivals, 15*time.Second)
		id := a.msg.Headers().Get("_watermill_message_uuid")
		d, ok := due[id]
		require.True(t, ok, "unknown or duplicate message %q", id)
		delete(due, id)
		if a.at.Before(d) {
			early++
		}
		meta, err := a.msg.Metadata()
		require.NoError(t, err)
		if meta.Timestamp.Before(d) {
			storedEarly++
		}
		worst = max(worst, a.at.Sub(d))
	}
	assert.Zero(t, early, "messages received before their due time")
	assert.Zero(t, storedEarly, "messages stored on the destination before their due time")
	assert.Less(t, worst, 10*time.Second, "latest arrival after its due time")
	t.Logf("%d messages, none early; latest %s after its due time", total, worst)
}

// The destination's consumers need nothing new: natstransport's Subscriber finds the schedule
// stream that captures the subject, and reads every header as it was published.
func TestNatstransportSubscriberReceivesTheMessageUnchanged(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dest := "orders." + unique(t)
	require.NoError(t, pub.EnsureDestinations(ctx, dest))
	_, sub, err := natstransport.New(natstransport.Config{URL: s.url, Durable: "d" + unique(t)}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	received, err := sub.Subscribe(ctx, dest)
	require.NoError(t, err)

	msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 42"))
	msg.Metadata.Set("tenant", "acme")
	msg.Metadata.Set("Кириллица", "line\nbreak")
	timeouts.DeliverAfter(msg, 700*time.Millisecond)
	require.NoError(t, pub.Publish(dest, msg))

	select {
	case got := <-received:
		got.Ack()
		assert.Equal(t, msg.UUID, got.UUID)
		assert.Equal(t, "charge order 42", string(got.Payload))
		assert.Equal(t, "acme", got.Metadata.Get("tenant"))
		assert.Equal(t, "line\nbreak", got.Metadata.Get("Кириллица"))
		due, err := time.Parse(time.RFC3339Nano, got.Metadata.Get(wire.HeaderDue))
		require.NoError(t, err)
		assert.False(t, time.Now().Before(due))
		assert.Empty(t, got.Metadata.Get(wire.HeaderExpire))
	case <-ctx.Done():
		t.Fatal("the message did not arrive")
	}
}
