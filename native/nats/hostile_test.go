package nats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/native/nats"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

func delayed(id string, after time.Duration) *message.Message {
	msg := message.NewMessage(id, []byte("payload of "+id))
	timeouts.DeliverAfter(msg, after)
	return msg
}

func TestMissingStreamIsAnErrorNamingIt(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, false)
	err := pub.Publish("orders."+unique(t), delayed(watermill.NewUUID(), time.Hour))
	require.ErrorIs(t, err, nats.ErrStream)
	assert.Contains(t, err.Error(), s.stream)
	err = pub.Verify(context.Background())
	require.ErrorIs(t, err, nats.ErrStream)
	assert.Contains(t, err.Error(), "does not exist")
	require.ErrorIs(t, pub.Cancel(context.Background(), "x"), nats.ErrStream)
}

func TestStreamWithoutSchedulesIsAnErrorNamingItNeverAnImmediateDelivery(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	dest := "orders." + unique(t)
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{s.prefix + ".>", dest}})
	require.NoError(t, err)
	arrivals := s.consume(t, dest)
	pub := s.publisher(t, false)

	err = pub.Publish(dest, delayed(watermill.NewUUID(), 2*time.Second))
	require.ErrorIs(t, err, nats.ErrStream)
	assert.Contains(t, err.Error(), "does not allow message schedules")
	assert.Contains(t, err.Error(), s.stream)
	err = pub.Verify(ctx)
	require.ErrorIs(t, err, nats.ErrStream)
	assert.Contains(t, err.Error(), "AllowMsgSchedules")
	nothing(t, arrivals, 3*time.Second)

	// Setup turns schedules on, keeping the destination it captures.
	require.NoError(t, pub.Setup(ctx))
	require.NoError(t, pub.Verify(ctx))
	require.NoError(t, pub.Publish(dest, delayed(watermill.NewUUID(), 500*time.Millisecond)))
	next(t, arrivals, 10*time.Second)
}

// The server refuses to turn schedules off on a stream, but the stream can be deleted and made
// again without them after the Publisher checked it: the server's refusal is ErrStream too.
func TestStreamRemadeWithoutSchedulesAfterTheFirstPublishIsAnError(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	pub := s.publisher(t, true)
	dest := "orders." + unique(t)
	require.NoError(t, pub.Publish(dest, delayed(watermill.NewUUID(), time.Hour)))
	require.NoError(t, s.js.DeleteStream(ctx, s.stream))
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{s.prefix + ".>", dest}})
	require.NoError(t, err)
	arrivals := s.consume(t, dest)

	err = pub.Publish(dest, delayed(watermill.NewUUID(), time.Second))
	require.ErrorIs(t, err, nats.ErrStream)
	assert.Contains(t, err.Error(), "does not allow message schedules")
	nothing(t, arrivals, 2*time.Second)
	err = pub.Publish(dest, delayed(watermill.NewUUID(), time.Second))
	require.ErrorIs(t, err, nats.ErrStream, "checked again, not cached")
}

func TestDueTimeTheServerRefusesIsAnError(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	dest := "orders." + unique(t)
	arrivals := s.consume(t, dest)
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // RFC 3339 has four-digit years
	results, err := pub.Send(context.Background(), time.Now(), []nats.Delayed{
		{Destination: dest, Due: far, Message: message.NewMessage(watermill.NewUUID(), []byte("x"))},
	})
	require.NoError(t, err)
	require.ErrorIs(t, results[0], nats.ErrRefused)
	assert.Contains(t, results[0].Error(), "10000-01-01")
	nothing(t, arrivals, time.Second)
}

func TestPastDueAndUndelayedMessagesAreDeliveredAtOnce(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	dest := "orders." + unique(t)
	require.NoError(t, pub.EnsureDestinations(context.Background(), dest))
	arrivals := s.consume(t, dest)

	past := message.NewMessage(watermill.NewUUID(), []byte("past"))
	timeouts.DeliverAt(past, time.Now().Add(-time.Hour))
	plain := message.NewMessage(watermill.NewUUID(), []byte("plain"))
	start := time.Now()
	require.NoError(t, pub.Publish(dest, past, plain))
	got := map[string]bool{}
	for range 2 {
		a := next(t, arrivals, 5*time.Second)
		got[string(a.msg.Data())] = true
		assert.Less(t, a.at.Sub(start), 5*time.Second)
	}
	assert.Equal(t, map[string]bool{"past": true, "plain": true}, got)
	require.ErrorIs(t, pub.Cancel(context.Background(), plain.UUID), nats.ErrNotScheduled)
}

func TestRefusedInputsNameTheProblemAndSendNothing(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	ctx := context.Background()
	dest := "orders." + unique(t)
	require.NoError(t, pub.EnsureDestinations(ctx, dest))
	arrivals := s.consume(t, dest)

	keyed := delayed(watermill.NewUUID(), time.Second)
	keyed.Metadata.Set(wire.HeaderKey, "order-42")
	err := pub.Publish(dest, keyed)
	require.ErrorIs(t, err, wire.ErrInvalidHeader)
	assert.Contains(t, err.Error(), wire.HeaderKey)

	natsHeader := delayed(watermill.NewUUID(), time.Second)
	natsHeader.Metadata.Set("Nats-Msg-Id", "x")
	err = pub.Publish(dest, natsHeader)
	require.ErrorIs(t, err, wire.ErrInvalidHeader)
	assert.Contains(t, err.Error(), "Nats-Msg-Id")

	badDue := message.NewMessage(watermill.NewUUID(), nil)
	badDue.Metadata.Set(wire.HeaderExpire, "tomorrow")
	require.ErrorIs(t, pub.Publish(dest, badDue), wire.ErrInvalidHeader)

	require.ErrorIs(t, pub.Publish(dest, delayed("", time.Second)), nats.ErrInvalidID)
	require.ErrorIs(t, pub.Publish(dest, delayed(strings.Repeat("x", nats.MaxIDLength+1), time.Second)), nats.ErrInvalidID)
	require.ErrorIs(t, pub.Publish(dest, delayed("line\nbreak", time.Second)), nats.ErrInvalidID)
	require.ErrorIs(t, pub.Publish(dest, delayed(" leading", time.Second)), nats.ErrInvalidID)
	require.ErrorIs(t, pub.Publish(dest, delayed("trailing\t", time.Second)), nats.ErrInvalidID)

	for _, bad := range []string{"", "orders.*", "orders.>", "a..b", "has space", "$JS.API.x", s.prefix + ".x", "tab\tx"} {
		err := pub.Publish(bad, delayed(watermill.NewUUID(), time.Second))
		require.ErrorIs(t, err, nats.ErrInvalidDestination, "destination %q", bad)
	}
	nothing(t, arrivals, 2*time.Second)
}

func TestDestinationOfAnotherStreamIsAnErrorNamingIt(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	pub := s.publisher(t, true)
	other := "other_" + unique(t)
	dest := "elsewhere." + unique(t)
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: other, Subjects: []string{dest}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.js.DeleteStream(context.Background(), other) })

	err = pub.Publish(dest, delayed(watermill.NewUUID(), time.Second))
	require.ErrorIs(t, err, nats.ErrInvalidDestination)
	assert.Contains(t, err.Error(), other)
	require.ErrorIs(t, pub.CheckDestination(ctx, dest), nats.ErrInvalidDestination)
	require.NoError(t, pub.CheckDestination(ctx, "free."+unique(t)))
}

func TestHostileIDsGetAScheduleEachAndArriveWithTheirIDs(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	dest := "orders." + unique(t)
	require.NoError(t, pub.EnsureDestinations(context.Background(), dest))
	arrivals := s.consume(t, dest)
	ids := []string{
		"plain-id_1", "with.dots.in.it", "with space", "star*", "gt>", ">", "*", "ünïcødé-日本",
		"~", "~plain", "in side", "$JS.API", "a/b\\c", "%2E", "\x00nul", "d2l0aC5kb3Rz", // base64url of "with.dots"
		strings.Repeat("long", nats.MaxIDLength/4),
	}
	var msgs []*message.Message
	for _, id := range ids {
		msgs = append(msgs, delayed(id, 700*time.Millisecond))
	}
	require.NoError(t, pub.Publish(dest, msgs...))
	got := map[string]int{}
	for range ids {
		a := next(t, arrivals, 10*time.Second)
		got[a.msg.Headers().Get("_watermill_message_uuid")]++
	}
	nothing(t, arrivals, 1500*time.Millisecond)
	for _, id := range ids {
		assert.Equal(t, 1, got[id], "id %q", id)
	}
}

func TestRepublishingAnIDReplacesItsPendingSchedule(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	dest := "orders." + unique(t)
	require.NoError(t, pub.EnsureDestinations(context.Background(), dest))
	arrivals := s.consume(t, dest)
	id := watermill.NewUUID()
	first := delayed(id, time.Second)
	first.Payload = []byte("first")
	require.NoError(t, pub.Publish(dest, first))
	second := message.NewMessage(id, []byte("second"))
	due := time.Now().Add(2500 * time.Millisecond)
	timeouts.DeliverAt(second, due)
	require.NoError(t, pub.Publish(dest, second))

	a := next(t, arrivals, 10*time.Second)
	assert.Equal(t, "second", string(a.msg.Data()))
	assert.False(t, a.at.Before(due))
	nothing(t, arrivals, 2*time.Second)
}

func TestCancelDeletesThePendingScheduleAndSaysWhenNoneWaits(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	ctx := context.Background()
	dest := "orders." + unique(t)
	require.NoError(t, pub.EnsureDestinations(ctx, dest))
	arrivals := s.consume(t, dest)

	cancelled := delayed("cancel me", 1500*time.Millisecond)
	kept := delayed(watermill.NewUUID(), 1500*time.Millisecond)
	require.NoError(t, pub.Publish(dest, cancelled, kept))
	require.NoError(t, pub.Cancel(ctx, cancelled.UUID))
	require.ErrorIs(t, pub.Cancel(ctx, cancelled.UUID), nats.ErrNotScheduled)
	require.ErrorIs(t, pub.Cancel(ctx, "never scheduled"), nats.ErrNotScheduled)

	a := next(t, arrivals, 10*time.Second)
	assert.Equal(t, kept.UUID, a.msg.Headers().Get("_watermill_message_uuid"))
	nothing(t, arrivals, 1500*time.Millisecond)
	// Fired: nothing left to cancel.
	require.ErrorIs(t, pub.Cancel(ctx, kept.UUID), nats.ErrNotScheduled)
}

func TestClosedPublisherRefusesEverything(t *testing.T) {
	s := newServer(t)
	pub := s.publisher(t, true)
	require.NoError(t, pub.Close())
	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish("orders", delayed(watermill.NewUUID(), time.Second)), nats.ErrClosed)
	require.ErrorIs(t, pub.Cancel(context.Background(), "x"), nats.ErrClosed)
	require.ErrorIs(t, pub.Setup(context.Background()), nats.ErrClosed)
}
