package amqptransport_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// TestPublishRate measures publishing with confirms to one durable queue and logs the rates; it
// asserts only that every message arrived.
func TestPublishRate(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for a few seconds")
	}
	b := setup(t)
	pub := newPublisher(t, b.config)
	q := b.queue("rate")
	const n = 2000
	msgs := func() []*message.Message {
		out := make([]*message.Message, n)
		for i := range out {
			out[i] = message.NewMessage(watermill.NewUUID(), make([]byte, 200))
		}
		return out
	}
	for _, run := range []struct {
		name    string
		publish func(msgs []*message.Message) error
	}{
		{"1 goroutine, 1 message per Publish", func(msgs []*message.Message) error {
			for _, m := range msgs {
				if err := pub.Publish(q, m); err != nil {
					return err
				}
			}
			return nil
		}},
		{"1 goroutine, 100 messages per Publish", func(msgs []*message.Message) error {
			for i := 0; i < len(msgs); i += 100 {
				if err := pub.Publish(q, msgs[i:i+100]...); err != nil {
					return err
				}
			}
			return nil
		}},
		{"8 goroutines, 1 message per Publish", func(msgs []*message.Message) error {
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := g; i < len(msgs); i += 8 {
						if err := pub.Publish(q, msgs[i]); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			return <-errs
		}},
	} {
		batch := msgs()
		start := time.Now()
		require.NoError(t, run.publish(batch))
		d := time.Since(start)
		t.Logf("%s: %d messages in %s = %.0f msg/s", run.name, n, d.Round(time.Millisecond), n/d.Seconds())
	}
	require.Eventually(t, func() bool { return b.count(t, q) == 3*n }, 10*time.Second, 50*time.Millisecond)
}
