package satellites_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/satellites"
	"github.com/timeoutmill/timeoutmill/wire"
)

// failingFirst fails the first n publishes to topic with err, then publishes to next.
type failingFirst struct {
	next  *recordingPublisher
	topic string
	err   error

	mu     sync.Mutex
	n      int
	failed int
}

func (p *failingFirst) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	if topic == p.topic && p.failed < p.n {
		p.failed++
		p.mu.Unlock()
		return p.err
	}
	p.mu.Unlock()
	return p.next.Publish(topic, msgs...)
}

func (p *failingFirst) Close() error { return nil }

func TestForwardFailingWithTheConnectionIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	// What the transports return while the connection is down or being made again.
	for name, cause := range map[string]error{
		"amqp091 ErrClosed":        fmt.Errorf("amqptransport: publishing 1 message(s) to %q: %w", "payments", amqp.ErrClosed),
		"broker stopping (320)":    &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'", Server: true},
		"connection refused":       &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")},
		"watermill-amqp reconnect": fmt.Errorf("publishing: %w", errors.New("not connected to AMQP")),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const failures = 3
			var flaky *failingFirst
			b := setupDispatch(t, func(c *satellites.DispatchConfig) {
				c.NumberOfRetries = 0 // the default: one counted attempt
				flaky = &failingFirst{next: c.Publisher.(*recordingPublisher), topic: "payments", err: cause, n: failures}
				c.Publisher = flaky
			})
			timeout := b.storeDue(t, "payments")

			deliveries := b.deliverUntilAcked(t, timeout.ID, 20)
			require.Equal(t, failures+1, deliveries, "nacked while the connection failed, forwarded once it worked")
			require.Len(t, b.published.to("payments"), 1)
			require.Empty(t, b.published.to(wire.DefaultErrorQueue), "a connection failure sends nothing to the error queue")
			require.Empty(t, b.trips.all())
		})
	}
}

func TestForwardRefusedForTheMessageStillCountsAnAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// The broker closes the channel for the message's sake: the message's own failure.
		cause := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 20000000 is larger than configured max size 16777216", Server: true, Recover: true}
		b := setupDispatch(t, func(c *satellites.DispatchConfig) {
			c.Publisher = &failingFirst{next: c.Publisher.(*recordingPublisher), topic: "payments", err: cause, n: 100}
		})
		timeout := b.storeDue(t, "payments")
		require.Equal(t, 1, b.deliverUntilAcked(t, timeout.ID, 20))
		failed := b.published.only(t, wire.DefaultErrorQueue)
		require.Equal(t, timeout.ID, failed.UUID)
		require.Contains(t, failed.Metadata.Get(wire.HeaderFailureReason), "PRECONDITION_FAILED")
	})
}

func TestConnectionThatStaysAwayTripsTheDispatchBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		trips := &tripLog{}
		b := setupDispatch(t, func(c *satellites.DispatchConfig) {
			breaker, err := breaker.NewCircuitBreaker(breaker.BreakerConfig{
				Name: "dispatch", TimeToWait: 300 * time.Millisecond, Message: critical.DispatchMessage,
				RetryDelay: 50 * time.Millisecond, OnTrip: trips.record,
			})
			require.NoError(t, err)
			t.Cleanup(breaker.Stop)
			c.Breaker = breaker
			c.Publisher = &failingFirst{next: c.Publisher.(*recordingPublisher), topic: "payments", err: amqp.ErrClosed, n: 1 << 30}
		})
		timeout := b.storeDue(t, "payments")
		start := time.Now()
		for len(trips.all()) == 0 {
			require.Less(t, time.Since(start), time.Minute, "the breaker trips once the connection stayed away past its wait")
			err := b.dispatch.Handle(dispatcherqueue.Encode(timeout.ID))
			require.Error(t, err, "nacked: the timeout stays for the next attempt")
			require.ErrorIs(t, err, amqp.ErrClosed)
		}
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "paced by the breaker, not earlier than its wait")
		require.Empty(t, b.published.to(wire.DefaultErrorQueue))
		got, err := b.store.Peek(context.Background(), timeout.ID)
		require.NoError(t, err, "the timeout is kept")
		require.Zero(t, got.FailureCount, "no attempt was counted")
	})
}
