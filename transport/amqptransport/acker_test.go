package amqptransport

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// brokerChannel models RabbitMQ's side of a channel's acks: the deliveries it holds unacked, and
// the channel error it raises for an ack or nack naming a tag it does not hold (which closes
// the channel in RabbitMQ: "PRECONDITION_FAILED - unknown delivery tag").
type brokerChannel struct {
	mu       sync.Mutex
	unacked  map[uint64]bool
	acked    map[uint64]int
	requeued map[uint64]int
	frames   int
	err      error
}

func newBrokerChannel(tags uint64) *brokerChannel {
	b := &brokerChannel{unacked: map[uint64]bool{}, acked: map[uint64]int{}, requeued: map[uint64]int{}}
	for tag := uint64(1); tag <= tags; tag++ {
		b.unacked[tag] = true
	}
	return b
}

func (b *brokerChannel) Ack(tag uint64, multiple bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames++
	if b.err == nil && !b.unacked[tag] {
		b.err = fmt.Errorf("unknown delivery tag %d (ack, multiple %t)", tag, multiple)
	}
	if b.err != nil {
		return b.err
	}
	for t := range b.unacked {
		if t == tag || (multiple && t < tag) {
			delete(b.unacked, t)
			b.acked[t]++
		}
	}
	return nil
}

func (b *brokerChannel) Nack(tag uint64, multiple, requeue bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames++
	if b.err == nil && (!b.unacked[tag] || multiple || !requeue) {
		b.err = fmt.Errorf("unexpected nack of %d (multiple %t, requeue %t)", tag, multiple, requeue)
	}
	if b.err != nil {
		return b.err
	}
	delete(b.unacked, tag)
	b.requeued[tag]++
	return nil
}

func TestAckerSendsASettledFrontAsOneMultipleAck(t *testing.T) {
	b := newBrokerChannel(100)
	a := newAcker(b)
	for tag := uint64(1); tag <= 100; tag++ {
		a.delivered(tag)
	}
	// Settled from the back: nothing at the front is settled until the very last.
	for tag := uint64(100); tag >= 2; tag-- {
		a.mu.Lock()
		a.queue[tag-1].state = ackPending
		a.mu.Unlock()
	}
	a.ack(1)
	a.stop()
	require.NoError(t, b.err)
	require.Empty(t, b.unacked)
	require.Equal(t, 1, b.frames, "one multiple-ack for the hundred")
}

func TestAckerAcksBehindAMessageStillBeingHandled(t *testing.T) {
	b := newBrokerChannel(5)
	a := newAcker(b)
	for tag := uint64(1); tag <= 5; tag++ {
		a.delivered(tag)
	}
	a.ack(3)
	a.nack(4)
	a.ack(5)
	// 1 and 2 still being handled: after singlesDelay the acks behind them go one by one.
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.unacked) == 2
	}, 5*time.Second, time.Millisecond)
	a.stop()
	require.NoError(t, b.err)
	require.Equal(t, map[uint64]bool{1: true, 2: true}, b.unacked, "the slow ones are still held; the rest free their prefetch slots")
	require.Equal(t, map[uint64]int{4: 1}, b.requeued)
}

// TestAckerNeverNamesASettledTagAndSettlesEachOnce settles deliveries in random orders from
// many goroutines, as a router's handlers do, against the broker model: no ack or nack the
// broker would refuse, every delivery acked or requeued exactly once, and far fewer frames than
// deliveries when the handlers finish close together.
func TestAckerNeverNamesASettledTagAndSettlesEachOnce(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(300)
		b := newBrokerChannel(uint64(n))
		a := newAcker(b)
		nacked := map[uint64]bool{}
		for tag := uint64(1); tag <= uint64(n); tag++ {
			a.delivered(tag)
			nacked[tag] = rng.IntN(10) == 0
		}
		order := rng.Perm(n)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < n; i += 4 {
					tag := uint64(order[i] + 1)
					if nacked[tag] {
						a.nack(tag)
					} else {
						a.ack(tag)
					}
				}
			})
		}
		wg.Wait()
		a.stop()
		require.NoError(t, b.err, "seed %d", seed)
		require.Empty(t, b.unacked, "seed %d: every delivery settled", seed)
		for tag := uint64(1); tag <= uint64(n); tag++ {
			if nacked[tag] {
				require.Equal(t, 1, b.requeued[tag], "seed %d tag %d", seed, tag)
				require.Zero(t, b.acked[tag], "seed %d tag %d: a nacked delivery is not acked", seed, tag)
			} else {
				require.Equal(t, 1, b.acked[tag], "seed %d tag %d", seed, tag)
			}
		}
	}
}
