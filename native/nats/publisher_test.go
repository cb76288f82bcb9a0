package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

func TestDelayedMessageArrivesOnItsDestinationNeverEarlyWithItsHeaders(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	ctx := context.Background()
	require.NoError(t, pub.Verify(ctx))
	dest := "orders." + unique(t)
	require.NoError(t, pub.EnsureDestinations(ctx, dest))
	arrivals := s.consume(t, dest)

	msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 42"))
	msg.Metadata.Set("tenant", "acme")
	msg.Metadata.Set("Кириллица", "line\nbreak")
	due := time.Now().Add(1500 * time.Millisecond)
	timeouts.DeliverAt(msg, due)
	require.NoError(t, pub.Publish(dest, msg))

	a := next(t, arrivals, 10*time.Second)
	assert.False(t, a.at.Before(due), "arrived %s early", due.Sub(a.at))
	meta, err := a.msg.Metadata()
	require.NoError(t, err)
	assert.False(t, meta.Timestamp.Before(due), "stored %s early", due.Sub(meta.Timestamp))
	assert.Equal(t, "charge order 42", string(a.msg.Data()))
	h := a.msg.Headers()
	assert.Equal(t, msg.UUID, h.Get("_watermill_message_uuid"))
	assert.Equal(t, "acme", h.Get("tenant"))
	assert.NotEmpty(t, h.Get(wire.HeaderDue))
	assert.Empty(t, h.Get(wire.HeaderExpire), "routing headers are removed")
	nothing(t, arrivals, time.Second)
}
