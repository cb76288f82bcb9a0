package timeouts

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/wire"
)

// recordingPublisher keeps what it was asked to publish, by topic.
type recordingPublisher struct {
	mu   sync.Mutex
	sent map[string][]*message.Message
	err  error // returned by every Publish when set
}

func (r *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if r.sent == nil {
		r.sent = map[string][]*message.Message{}
	}
	r.sent[topic] = append(r.sent[topic], msgs...)
	return nil
}

func (r *recordingPublisher) Close() error { return nil }

func (r *recordingPublisher) to(topic string) []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[topic]
}

func TestPublisherRoutesOnlyWhatIsNotDueYet(t *testing.T) {
	next := &recordingPublisher{}
	p, err := NewPublisher(next, "orders")
	require.NoError(t, err)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	p.now, p.reached = func() time.Time { return now }, func() time.Time { return now }

	later := message.NewMessage("later", []byte("a"))
	later.Metadata.Set("app", "kept")
	DeliverAt(later, now.Add(time.Minute))
	due := message.NewMessage("due", []byte("b"))
	DeliverAt(due, now) // due already: straight to its topic
	plain := message.NewMessage("plain", []byte("c"))
	before := later.Metadata.Get(wire.HeaderExpire)

	require.NoError(t, p.Publish("reminders", later, due, plain))

	routed := next.to(wire.TimeoutsQueue("orders"))
	require.Len(t, routed, 1)
	require.Equal(t, "later", routed[0].UUID)
	require.Equal(t, "reminders", routed[0].Metadata.Get(wire.HeaderDestination))
	require.Equal(t, before, routed[0].Metadata.Get(wire.HeaderExpire))
	require.Equal(t, "kept", routed[0].Metadata.Get("app"))
	require.Empty(t, later.Metadata.Get(wire.HeaderDestination), "the caller's message is not modified")

	direct := next.to("reminders")
	require.Len(t, direct, 2)
	require.Equal(t, "due", direct[0].UUID)
	require.Empty(t, direct[0].Metadata.Get(wire.HeaderExpire), "a due message leaves without routing headers")
	require.NotEmpty(t, due.Metadata.Get(wire.HeaderExpire), "the caller's message keeps its own")
	require.Same(t, plain, direct[1], "a message without a delay goes as it is")
}

func TestPublisherRefusesAnUnreadableDelayAndPublishesNothing(t *testing.T) {
	next := &recordingPublisher{}
	p, err := NewPublisher(next, "orders")
	require.NoError(t, err)
	bad := message.NewMessage("bad", nil)
	bad.Metadata.Set(wire.HeaderExpire, "next tuesday")
	good := message.NewMessage("good", nil)

	err = p.Publish("reminders", good, bad)
	require.ErrorIs(t, err, wire.ErrInvalidHeader)
	require.ErrorContains(t, err, "bad")
	require.Empty(t, next.to("reminders"), "nothing is published when one message is refused")
}

func TestPublisherWrapsTheBrokersError(t *testing.T) {
	broker := errors.New("connection reset")
	p, err := NewPublisher(&recordingPublisher{err: broker}, "orders")
	require.NoError(t, err)
	msg := message.NewMessage("m", nil)
	DeliverAfter(msg, time.Hour)
	require.ErrorIs(t, p.Publish("reminders", msg), broker)
}

func TestNewPublisherRefusesWhatCannotWork(t *testing.T) {
	_, err := NewPublisher(nil, "orders")
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewPublisher(&recordingPublisher{}, "")
	require.ErrorIs(t, err, ErrInvalidConfig)
}
