package satellites_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
)

// deadlinePublisher records the deadline each message's context has while it is published.
type deadlinePublisher struct {
	deadlines []time.Time
	err       error
}

func (p *deadlinePublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		d, _ := m.Context().Deadline()
		p.deadlines = append(p.deadlines, d)
	}
	return p.err
}

func (p *deadlinePublisher) Close() error { return nil }

func guardBreaker(t *testing.T, callTimeout time.Duration, trips *tripLog) *breaker.CircuitBreaker {
	t.Helper()
	b, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
		Name: "dispatch", TimeToWait: time.Minute, CallTimeout: callTimeout, Message: critical.DispatchMessage,
		RetryDelay: time.Millisecond, OnTrip: trips.record,
	})
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	return b
}

// A guarded Publish gives each message the breaker's call deadline for its length.
// Afterwards each message has its own context back, so a later publish has no stale deadline.
func TestGuardedPublisherLendsTheCallDeadlineForThePublishOnly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inner := &deadlinePublisher{}
		p := satellites.GuardedPublisher{Publisher: inner, Breaker: guardBreaker(t, 3*time.Second, &tripLog{})}
		type key struct{}
		own := context.WithValue(context.Background(), key{}, "mine")
		a, b := message.NewMessage("a", nil), message.NewMessage("b", nil)
		a.SetContext(own)

		require.NoError(t, p.Publish("payments", a, b))
		want := time.Now().Add(3 * time.Second) // fake time stands still in the bubble
		require.Equal(t, []time.Time{want, want}, inner.deadlines, "each message carries the call's deadline")
		require.Equal(t, own, a.Context(), "its own context back")
		_, has := b.Context().Deadline()
		require.False(t, has, "no deadline left behind")
	})
}

// hangingPublisher never answers until its gate opens, as a broker that stopped answering.
type hangingPublisher struct{ gate chan struct{} }

func (p *hangingPublisher) Publish(string, ...*message.Message) error { <-p.gate; return nil }

func (p *hangingPublisher) Close() error { return nil }

// A Publish that hangs is a call in flight: the breaker trips after its wait, before it returns.
func TestGuardedPublisherHangingTripsItsBreakerOnTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		trips := &tripLog{}
		inner := &hangingPublisher{gate: make(chan struct{})}
		p := satellites.GuardedPublisher{Publisher: inner, Breaker: guardBreaker(t, time.Second, trips)}
		done := make(chan error, 1)
		go func() { done <- p.Publish("payments", message.NewMessage("a", nil)) }()
		time.Sleep(time.Minute - time.Millisecond) // advances fake time to just before the wait
		require.Empty(t, trips.all(), "not before the breaker's wait")
		time.Sleep(time.Millisecond) // advances fake time to the wait
		synctest.Wait()
		require.Len(t, trips.all(), 1, "tripped while the publish still hangs")
		close(inner.gate)
		require.NoError(t, <-done)
	})
}

// A Publish of no messages passes through: there is no context to lend a deadline to.
func TestGuardedPublisherOfNoMessagesPassesThrough(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inner := &deadlinePublisher{}
		p := satellites.GuardedPublisher{Publisher: inner, Breaker: guardBreaker(t, time.Second, &tripLog{})}
		require.NoError(t, p.Publish("payments"))
		require.Empty(t, inner.deadlines)
	})
}
