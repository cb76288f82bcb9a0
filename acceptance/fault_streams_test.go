package acceptance

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/transport/redistransport"
)

// TestFaultStreamBrokerRestartUnderLoad stops Redis, and NATS, each a server of the test's own
// (the shared ones are never touched), for 10 s while timeouts are being sent, stored and
// dispatched by a `timeoutmill run` process, then starts it again on the same data. The service
// reconnects by itself, raises no critical error, and nothing is lost. The store is SQLite, so
// the broker is the only server that goes away. The producer and the receiver use the transport
// packages, retrying a publish until the broker takes it, as a producer must.
func TestFaultStreamBrokerRestartUnderLoad(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	for _, kind := range []string{"redis", "nats"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const count = 1000
			srv := newPrivateServers(t)
			started := srv.up(t, kind)
			url := srv.redisURL()
			open := func(t *testing.T) pubSub {
				pub, sub, err := redistransport.New(context.Background(), redistransport.Config{URL: url, Consumers: 8, ClaimAfter: brokerRedeliverAfter}, testLogger())
				require.NoError(t, err)
				t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
				return pubSub{pub: pub, sub: sub}
			}
			if kind == "nats" {
				url = srv.natsURL()
				open = func(t *testing.T) pubSub {
					pub, sub, err := natstransport.New(natstransport.Config{URL: url, Consumers: 8, AckWait: brokerRedeliverAfter}, testLogger())
					require.NoError(t, err)
					t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
					return pubSub{pub: pub, sub: sub}
				}
			}
			endpoint := "fault-" + kind + "-" + randomHex(t, 4)
			dest, errorQueue := endpoint+".due", endpoint+".error"
			store := "sqlite://" + filepath.Join(t.TempDir(), "timeouts.db")
			svc := startService(t, kind, runArgs(endpoint, store, url, errorQueue, "--close-timeout", "10s")...)
			receiver := open(t)
			got := counting(t, receiver.sub, dest)
			errs := counting(t, receiver.sub, errorQueue)

			// 50 timeouts every 250 ms for 5 s, each due 2 s after it is sent; each publish is
			// retried until the broker takes it.
			producer, err := timeouts.NewPublisher(open(t).pub, endpoint)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			ids := make(map[string]bool, count)
			var msgs []*message.Message
			for range count {
				m := message.NewMessage(watermill.NewUUID(), []byte("x"))
				ids[m.UUID] = true
				msgs = append(msgs, m)
			}
			sent := make(chan error, 1)
			go func() {
				tick := time.NewTicker(250 * time.Millisecond)
				defer tick.Stop()
				for i, m := range msgs {
					if i > 0 && i%50 == 0 {
						<-tick.C
					}
					timeouts.DeliverAfter(m, 2*time.Second)
					for producer.Publish(dest, m) != nil {
						select {
						case <-ctx.Done():
							sent <- ctx.Err()
							return
						case <-time.After(200 * time.Millisecond):
						}
					}
				}
				sent <- nil
			}()

			time.Sleep(4 * time.Second)
			before := got.distinct()
			stopping := time.Now()
			srv.down(t, kind)
			time.Sleep(10 * time.Second)
			srv.up(t, kind)
			back := time.Now()
			require.NoError(t, <-sent)
			allDelivered := got.waitFor(ids, 3*time.Minute)
			allAt := time.Now()
			dups := got.duplicates()
			faultLog(t, "%s: %d timeouts; server start %s; server down %s after %d were delivered; all %d delivered: %t, "+
				"%s after it was back; duplicates %d; error queue %d; critical errors %d",
				kind, count, started.Round(time.Millisecond), back.Sub(stopping).Round(time.Millisecond), before, got.distinct(),
				allDelivered, allAt.Sub(back).Round(time.Millisecond), dups, errs.distinct(), svc.count(criticalLogged))
			require.True(t, allDelivered, "all delivered after the restart (%d of %d)", got.distinct(), count)
			require.Zero(t, errs.distinct(), "a broker restart sends nothing to the error queue")
			require.Zero(t, svc.count(criticalLogged), "a 10 s restart is no critical error:\n%s", svc.tail(20))
			require.Less(t, before, count, "some deliveries were left for after the restart, so the service had to reconnect")
			require.True(t, svc.running(), "the service survived the restart:\n%s", svc.tail(20))
			if kind == "nats" {
				require.Positive(t, svc.count("Connected again"), "the service logs its reconnection:\n%s", svc.tail(20))
			}
			svc.signal(t, sigterm)
			code, _ := svc.wait(t, time.Minute)
			require.Equal(t, 0, code)
		})
	}
}

// counter counts the distinct messages a subscription received, acking each.
type counter struct {
	mu    sync.Mutex
	seen  map[string]int
	added chan struct{}
}

func counting(t *testing.T, sub message.Subscriber, topic string) *counter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	c := &counter{seen: map[string]int{}, added: make(chan struct{}, 1)}
	go func() {
		for m := range msgs {
			c.mu.Lock()
			c.seen[m.UUID]++
			c.mu.Unlock()
			m.Ack()
			select {
			case c.added <- struct{}{}:
			default:
			}
		}
	}()
	return c
}

func (c *counter) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

func (c *counter) duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return duplicates(c.seen)
}

// waitFor waits until every id was received, or within passed.
func (c *counter) waitFor(ids map[string]bool, within time.Duration) bool {
	deadline := time.After(within)
	for {
		c.mu.Lock()
		all := true
		for id := range ids {
			if c.seen[id] == 0 {
				all = false
				break
			}
		}
		c.mu.Unlock()
		if all {
			return true
		}
		select {
		case <-c.added:
		case <-time.After(time.Second):
		case <-deadline:
			return false
		}
	}
}
