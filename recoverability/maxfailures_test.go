package recoverability_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/wire"
)

// retryRecorder records, for each delayed retry published to the work queue, how long it is to
// be ignored: its ignore-until less the moment it was published.
type retryRecorder struct {
	message.Publisher
	workQueue string
	mu        sync.Mutex
	waits     []time.Duration
}

func (p *retryRecorder) Publish(topic string, msgs ...*message.Message) error {
	now := time.Now()
	if topic == p.workQueue {
		for _, m := range msgs {
			if until, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(wire.HeaderRetryIgnoreUntil)); err == nil {
				p.mu.Lock()
				p.waits = append(p.waits, until.Sub(now))
				p.mu.Unlock()
			}
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

func (p *retryRecorder) recorded() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.waits...)
}

// MaximumFailureCount with Shuttle's semantics, set in Go or read from a file: [1 s, 2 s] with
// MaximumFailureCount 5 waits 1 s, 2 s, 2 s, 2 s, and the 5th failure goes to the error queue.
func TestMaximumFailureCountRetriesWithTheLastDurationUntilTheCount(t *testing.T) {
	t.Parallel()
	sources := map[string]func(t *testing.T, cfg *recoverability.Config){
		"Go config": func(_ *testing.T, cfg *recoverability.Config) {
			cfg.DurationToIgnoreOnFailure = []time.Duration{time.Second, 2 * time.Second}
			cfg.MaximumFailureCount = 5
		},
		"Shuttle file": func(t *testing.T, cfg *recoverability.Config) {
			require.NoError(t, recoverability.ReadConfig(strings.NewReader(`{"Shuttle": {"ServiceBus": {"Inbox": {
				"DurationToIgnoreOnFailure": ["00:00:01", "00:00:02"], "MaximumFailureCount": 5}}}}`), cfg))
		},
	}
	for name, configure := range sources {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ps := newGoChannel(t)
			errs := subscribe(t, ps, wire.DefaultErrorQueue)
			cfg := baseConfig(ps)
			configure(t, &cfg)
			require.Equal(t, 5, cfg.MaximumFailureCount)
			recorder := &retryRecorder{Publisher: ps, workQueue: workQueue}
			cfg.Publisher = recorder
			b := start(t, ps, cfg, func(n int, _ *message.Message) error { return fmt.Errorf("failure %d: %w", n, errRefused) })

			msg := message.NewMessage(watermill.NewUUID(), []byte("doomed"))
			require.NoError(t, ps.Publish(workQueue, msg))
			failed := await(t, errs, time.Minute).msg

			calls := b.calls.of(msg.UUID)
			require.Len(t, calls, 5, "retried while failures < MaximumFailureCount")
			want := []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
			waits := recorder.recorded()
			require.Len(t, waits, len(want))
			for i, w := range want {
				require.InDelta(t, w.Seconds(), waits[i].Seconds(), 0.25, "failure %d is ignored for %s, got %s", i+1, w, waits[i])
				require.GreaterOrEqual(t, calls[i+1].at.Sub(calls[i].at), w, "call %d came before its wait was over", i+2)
				require.Equal(t, fmt.Sprint(i+1), calls[i+1].metadata.Get(wire.HeaderRetryDelayedRetries))
			}
			require.Equal(t, msg.UUID, failed.UUID)
			require.Equal(t, "failure 5: payment provider refused the charge", failed.Metadata.Get(wire.HeaderFailureReason))
			require.Equal(t, "5", failed.Metadata.Get(wire.HeaderFailureAttempts), "the error queue records the 5 failures")
			require.Equal(t, "4", failed.Metadata.Get(wire.HeaderFailureDelayedRetries))
			requireNothing(t, errs, 500*time.Millisecond)
			require.Len(t, b.calls.of(msg.UUID), 5, "never called again")
		})
	}
}

// How MaximumFailureCount meets the rest of the configuration: a failure is a delivery, the
// immediate retries of the first included; 1 means no delayed retries; without a schedule, the
// retries do not wait; and without MaximumFailureCount the schedule's length decides.
func TestMaximumFailureCountCountsDeliveries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		immediate     int
		schedule      []time.Duration
		maxFailures   int
		calls         int
		delayed       string
		minFirstDelay time.Duration
	}{
		{"immediate retries are one failure", 2, []time.Duration{100 * time.Millisecond}, 2, 4, "1", 100 * time.Millisecond},
		{"1: no delayed retries", 0, []time.Duration{time.Hour}, 1, 1, "0", 0},
		{"no schedule: retries without a wait", 0, []time.Duration{}, 3, 3, "2", 0},
		{"not given: one retry per entry", 0, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, 0, 3, "2", 100 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := newGoChannel(t)
			errs := subscribe(t, ps, wire.DefaultErrorQueue)
			cfg := baseConfig(ps)
			cfg.ImmediateRetries, cfg.DurationToIgnoreOnFailure, cfg.MaximumFailureCount = c.immediate, c.schedule, c.maxFailures
			b := start(t, ps, cfg, func(int, *message.Message) error { return errRefused })

			msg := message.NewMessage(watermill.NewUUID(), nil)
			require.NoError(t, ps.Publish(workQueue, msg))
			failed := await(t, errs, 30*time.Second).msg
			calls := b.calls.of(msg.UUID)
			require.Len(t, calls, c.calls)
			require.Equal(t, fmt.Sprint(c.calls), failed.Metadata.Get(wire.HeaderFailureAttempts))
			require.Equal(t, c.delayed, failed.Metadata.Get(wire.HeaderFailureDelayedRetries))
			if c.minFirstDelay > 0 {
				require.GreaterOrEqual(t, calls[c.immediate+1].at.Sub(calls[c.immediate].at), c.minFirstDelay)
			}
			requireNothing(t, errs, 300*time.Millisecond)
			require.Len(t, b.calls.of(msg.UUID), c.calls)
		})
	}
}
