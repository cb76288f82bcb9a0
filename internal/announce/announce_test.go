package announce_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/announce"
)

// recorder is a message.Publisher that records what it was given, can fail chosen batches, and
// counts the calls running at once. A call waits (at most 5 s, like a slow broker's round trip)
// until meet calls are running together, so that calls made side by side are seen side by side
// however the machine schedules them; calls made one after the other are not, and wait it out.
type recorder struct {
	mu      sync.Mutex
	topics  map[string]bool
	ids     []string
	msgs    int
	running int
	peak    int
	meet    int
	fail    func(first string) bool
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	r.running++
	r.peak = max(r.peak, r.running)
	r.topics[topic] = true
	r.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		met := r.peak >= r.meet
		r.mu.Unlock()
		if met {
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running--
	if r.fail != nil && r.fail(string(msgs[0].Payload)) {
		return errors.New("broker said no")
	}
	for _, m := range msgs {
		if !announce.IsAnnouncement(m.Context()) {
			return errors.New("an announcement's context does not say so")
		}
		ids, err := dispatcherqueue.Decode(m)
		if err != nil {
			return err
		}
		r.msgs++
		r.ids = append(r.ids, ids...)
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "id-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	return out
}

func TestPublishDueAnnouncesEveryIDOnce(t *testing.T) {
	for _, n := range []int{0, 1, 99, 100, 101, 500, 677} {
		rec := &recorder{topics: map[string]bool{}, meet: min((n+99)/100, 2)}
		p := announce.NewPublisher(rec, "orders", 100, 1)
		want := ids(n)
		require.NoError(t, p.PublishDue(t.Context(), want, time.Time{}))
		got := slices.Clone(rec.ids)
		slices.Sort(got)
		require.Equal(t, len(want), len(got), "n=%d", n)
		if n > 0 {
			require.Equal(t, want, got, "n=%d", n)
			require.Equal(t, map[string]bool{"orders.TimeoutsDispatcher": true}, rec.topics)
		}
		require.LessOrEqual(t, rec.peak, 4, "calls at once")
		if n > 100 {
			require.Greater(t, rec.peak, 1, "batches are published side by side")
		}
	}
}

func TestPublishDueReportsFailedBatches(t *testing.T) {
	rec := &recorder{topics: map[string]bool{}, fail: func(first string) bool { return first == ids(300)[100] }}
	p := announce.NewPublisher(rec, "orders", 100, 1)
	err := p.PublishDue(t.Context(), ids(300), time.Time{})
	require.ErrorContains(t, err, "broker said no")
	require.Len(t, rec.ids, 200, "the other batches are announced")
	require.NotContains(t, rec.ids, ids(300)[100])
	var na *announce.NotAnnouncedError
	require.ErrorAs(t, err, &na)
	require.Equal(t, ids(300)[100:200], na.IDs, "the error names exactly the failed batch's ids, to publish again")
}

func TestIsAnnouncement(t *testing.T) {
	require.False(t, announce.IsAnnouncement(t.Context()))
	require.False(t, announce.IsAnnouncement(message.NewMessage("x", nil).Context()))
}

func TestPublishDuePutsManyIDsInAMessage(t *testing.T) {
	for _, tc := range []struct {
		ids, perMessage, wantMsgs int
	}{
		{1, 100, 1}, {100, 100, 1}, {101, 100, 2}, {150, 100, 2}, {500, 100, 5}, {677, 100, 7}, {3, 1, 3},
	} {
		rec := &recorder{topics: map[string]bool{}, meet: 1}
		p := announce.NewPublisher(rec, "orders", 100, tc.perMessage)
		want := ids(tc.ids)
		require.NoError(t, p.PublishDue(t.Context(), want, time.Time{}))
		got := slices.Clone(rec.ids)
		slices.Sort(got)
		require.Equal(t, want, got, "%+v: each id once", tc)
		require.Equal(t, tc.wantMsgs, rec.msgs, "%+v: messages", tc)
	}
}

func TestPublishDueReportsEveryIDOfAFailedCall(t *testing.T) {
	rec := &recorder{topics: map[string]bool{}, meet: 1, fail: func(string) bool { return true }}
	p := announce.NewPublisher(rec, "orders", 100, 100)
	err := p.PublishDue(t.Context(), ids(250), time.Time{})
	var na *announce.NotAnnouncedError
	require.ErrorAs(t, err, &na)
	got := slices.Clone(na.IDs)
	slices.Sort(got)
	require.Equal(t, ids(250), got, "the ids of every message of the failed call, to publish again")
}

// An announcement made ahead says when its ids are due, to the nanosecond; one of ids due already
// says nothing, as the original format did.
func TestPublishDueSaysWhenTheIDsAreDue(t *testing.T) {
	var got []*message.Message
	pub := publisherFunc(func(_ string, msgs ...*message.Message) error {
		got = append(got, msgs...)
		return nil
	})
	p := announce.NewPublisher(pub, "orders", 100, 2)
	dueBy := time.Date(2026, 11, 26, 3, 4, 5, 123456789, time.FixedZone("CET", 3600))
	require.NoError(t, p.PublishDue(t.Context(), []string{"a", "b", "c"}, dueBy))
	require.NoError(t, p.PublishDue(t.Context(), []string{"d"}, time.Time{}))
	require.Len(t, got, 3)
	for _, m := range got[:2] {
		require.Equal(t, "2026-11-26T02:04:05.123456789Z", m.Metadata.Get(dispatcherqueue.HeaderDispatchAt))
		at, ok, err := dispatcherqueue.DueBy(m)
		require.NoError(t, err)
		require.True(t, ok)
		require.False(t, at.Before(dueBy), "read back never earlier: %s", at)
		require.Less(t, at.Sub(dueBy), time.Microsecond)
	}
	_, ok, err := dispatcherqueue.DueBy(got[2])
	require.NoError(t, err)
	require.False(t, ok)

	got[2].Metadata.Set(dispatcherqueue.HeaderDispatchAt, "soon")
	_, _, err = dispatcherqueue.DueBy(got[2])
	require.ErrorIs(t, err, dispatcherqueue.ErrMalformed)
}

type publisherFunc func(topic string, msgs ...*message.Message) error

func (f publisherFunc) Publish(topic string, msgs ...*message.Message) error {
	return f(topic, msgs...)
}
func (f publisherFunc) Close() error { return nil }
