package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// ceilingGoChannel names the in-process ceiling row.
const ceilingGoChannel = "GoChannel relay (one router hop)"

// relayBatch is how many ids the relay publishes at a time: the poller's claim.
const relayBatch = 500

// goChannelRelay measures the one hop every due message takes in the emulated pipeline on
// GoChannel, and nothing else: ids published 100 a call to a queue, as the poller announces them,
// a router handler that publishes a message with the same UUID and payload to the destination, as
// the dispatch satellite forwards, and a consumer that acks. GoChannel hands a subscriber one
// message at a time and waits for its ack, so this hop is serial; no store is involved. Drain =
// messages ÷ (last arrival − first publish).
func goChannelRelay(ctx context.Context, env Env, plan Plan) (Result, error) {
	n := plan.Backlog
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, env.logger())
	defer pubsub.Close()
	const in, out = "relay.in", "relay.out"
	msgs, err := pubsub.Subscribe(ctx, out)
	if err != nil {
		return Result{}, fmt.Errorf("subscribing to %s: %w", out, err)
	}
	got := countArrivals(msgs, n)

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, env.logger())
	if err != nil {
		return Result{}, fmt.Errorf("creating the router: %w", err)
	}
	router.AddConsumerHandler("relay", in, pubsub, func(msg *message.Message) error {
		return pubsub.Publish(out, message.NewMessage(msg.UUID, msg.Payload))
	})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = router.Run(context.WithoutCancel(ctx))
	}()
	defer func() {
		_ = router.Close()
		<-stopped
	}()
	select {
	case <-router.Running():
	case <-stopped:
		return Result{}, fmt.Errorf("the router stopped at once")
	}

	batch := make([]*message.Message, n)
	for i := range batch {
		batch[i] = message.NewMessage(watermill.NewUUID(), []byte(watermill.NewUUID()))
	}
	// Published as the poller announces: 500 at a time, 100 a call, at most two batches ahead of
	// the arrivals (published all at once, 20,000 goroutines would queue on the subscriber and
	// measure the scheduler rather than the hop).
	start := time.Now()
	for i := 0; i < n; i += relayBatch {
		for i-got.count() >= 2*relayBatch {
			time.Sleep(100 * time.Microsecond)
		}
		for j := i; j < min(n, i+relayBatch); j += 100 {
			if err := pubsub.Publish(in, batch[j:min(n, j+100, i+relayBatch)]...); err != nil {
				return Result{}, fmt.Errorf("publishing to %s: %w", in, err)
			}
		}
	}
	unique, dups, _, last := got.wait(ctx, time.Minute)
	r := Result{
		System: ceilingGoChannel, Kind: KindCeiling, Messages: n,
		Counted: true, Lost: n - unique, Duplicated: dups,
		Notes: []string{"no store: ids published 500 at a time (100 a call, ≤ 1,000 ahead), a router handler republishes each, a consumer acks; GoChannel delivers one message at a time per subscriber"},
	}
	if unique > 0 {
		r.DrainRate = float64(unique) / last.Sub(start).Seconds()
		r.Figures = map[string]float64{"drain": r.DrainRate}
	}
	return r, nil
}
