package dispatcherqueue_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/dispatcherqueue"
)

// recorder is a message.Publisher that records what it was given, can fail chosen batches, and
// counts the calls running at once. A call waits (at most 5 s, like a slow broker's round trip)
// until meet calls are running together, so that calls made side by side are seen side by side
// however the machine schedules them; calls made one after the other are not, and wait it out.
type recorder struct {
	mu      sync.Mutex
	topics  map[string]bool
	ids     []string
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
		if !dispatcherqueue.IsAnnouncement(m.Context()) {
			return errors.New("an announcement's context does not say so")
		}
		id, err := dispatcherqueue.Decode(m)
		if err != nil {
			return err
		}
		r.ids = append(r.ids, id)
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
		p := dispatcherqueue.NewPublisher(rec, "orders", 100)
		want := ids(n)
		require.NoError(t, p.PublishDue(t.Context(), want))
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
	p := dispatcherqueue.NewPublisher(rec, "orders", 100)
	err := p.PublishDue(t.Context(), ids(300))
	require.ErrorContains(t, err, "broker said no")
	require.Len(t, rec.ids, 200, "the other batches are announced")
	require.NotContains(t, rec.ids, ids(300)[100])
	var na *dispatcherqueue.NotAnnouncedError
	require.ErrorAs(t, err, &na)
	require.Equal(t, ids(300)[100:200], na.IDs, "the error names exactly the failed batch's ids, to publish again")
}

func TestIsAnnouncement(t *testing.T) {
	require.False(t, dispatcherqueue.IsAnnouncement(t.Context()))
	require.False(t, dispatcherqueue.IsAnnouncement(message.NewMessage("x", nil).Context()))
}
