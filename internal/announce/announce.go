// Package announce publishes the ids of due timeouts to an endpoint's dispatcher queue, in the
// format of package dispatcherqueue: the poller's side of that queue.
package announce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

// announcementKey marks the context of the messages PublishDue publishes.
type announcementKey struct{}

// IsAnnouncement reports whether ctx is the context of a message PublishDue publishes: an
// announcement of a due id, which may be lost without losing the timeout, since the store keeps
// it and the poller claims it again when its lease runs out. A transport may therefore publish
// such a message without making it durable (amqptransport does with
// Config.TransientAnnouncements).
func IsAnnouncement(ctx context.Context) bool {
	v, _ := ctx.Value(announcementKey{}).(bool)
	return v
}

// DefaultBatchSize is how many messages Publisher hands the underlying publisher in one call.
const DefaultBatchSize = 100

// DefaultIDsPerMessage is how many ids a Publisher puts in one message unless told otherwise.
const DefaultIDsPerMessage = 100

// maxParallelBatches bounds the calls one PublishDue makes to the underlying publisher at once.
// A publisher that waits for the broker's confirms (amqptransport) takes about a round trip per
// call whatever its size; side by side, the batches of a claim cost one round trip, not one each.
const maxParallelBatches = 4

// Publisher publishes due ids to one endpoint's dispatcher queue.
type Publisher struct {
	pub           message.Publisher
	topic         string
	batchSize     int
	idsPerMessage int
}

// NewPublisher returns a Publisher for endpoint's dispatcher queue that puts up to
// idsPerMessage ids in a message and hands the underlying publisher up to batchSize messages in
// one call. batchSize <= 0 means DefaultBatchSize, idsPerMessage <= 0 DefaultIDsPerMessage; 1
// writes only the one-id format. idsPerMessage is capped at dispatcherqueue.MaxIDsPerMessage.
func NewPublisher(pub message.Publisher, endpoint string, batchSize, idsPerMessage int) *Publisher {
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	if idsPerMessage <= 0 {
		idsPerMessage = DefaultIDsPerMessage
	}
	idsPerMessage = min(idsPerMessage, dispatcherqueue.MaxIDsPerMessage)
	return &Publisher{pub: pub, topic: wire.DispatcherQueue(endpoint), batchSize: batchSize, idsPerMessage: idsPerMessage}
}

// Topic is the dispatcher queue's name.
func (p *Publisher) Topic() string { return p.topic }

// split divides ids into as few messages as idsPerMessage allows, of nearly equal size, so that
// the dispatch satellites (or competing instances) share a claim evenly.
func (p *Publisher) split(ids []string) [][]string {
	if len(ids) == 0 {
		return nil
	}
	n := (len(ids) + p.idsPerMessage - 1) / p.idsPerMessage
	size := (len(ids) + n - 1) / n
	out := make([][]string, 0, n)
	for start := 0; start < len(ids); start += size {
		out = append(out, ids[start:min(start+size, len(ids))])
	}
	return out
}

// PublishDue publishes the ids, due by dueBy (dispatcherqueue.HeaderDispatchAt; the zero time: due now, no
// header), up to idsPerMessage in a message, batchSize messages per call to
// the underlying publisher (which Watermill requires to be safe for concurrent use), up to
// maxParallelBatches calls at once; the ids' order is not kept across messages. It returns once
// every call has returned. On error it returns a *NotAnnouncedError naming the ids of the failed
// calls, which the caller may publish again (a failed call may have published some of them: a
// retry can announce an id twice, which the dispatch satellite tolerates).
func (p *Publisher) PublishDue(ctx context.Context, ids []string, dueBy time.Time) error {
	ctx = context.WithValue(ctx, announcementKey{}, true)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed NotAnnouncedError
		sem    = make(chan struct{}, maxParallelBatches)
	)
	groups := p.split(ids)
	publish := func(batch [][]string) {
		msgs := make([]*message.Message, 0, len(batch))
		for _, g := range batch {
			m := dispatcherqueue.Encode(g...)
			if !dueBy.IsZero() {
				m.Metadata.Set(dispatcherqueue.HeaderDispatchAt, wireparse.FormatExpire(dueBy))
			}
			m.SetContext(ctx)
			msgs = append(msgs, m)
		}
		if err := p.publish(msgs); err != nil {
			mu.Lock()
			for _, g := range batch {
				failed.IDs = append(failed.IDs, g...)
			}
			failed.Errs = append(failed.Errs, err)
			mu.Unlock()
		}
	}
	for start := 0; start < len(groups); start += p.batchSize {
		end := min(start+p.batchSize, len(groups))
		if end == len(groups) && len(sem) == 0 {
			// The last (or only) batch, with nothing else in flight: no goroutine needed.
			publish(groups[start:end])
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			publish(groups[start:end])
		}()
	}
	wg.Wait()
	if len(failed.Errs) > 0 {
		return &failed
	}
	return nil
}

// NotAnnouncedError is PublishDue's error: the ids its failed calls carried, and why they failed.
type NotAnnouncedError struct {
	IDs  []string
	Errs []error
}

func (e *NotAnnouncedError) Error() string {
	return fmt.Sprintf("%d due ids not announced: %v", len(e.IDs), errors.Join(e.Errs...))
}

// Unwrap returns the failed calls' errors, for errors.Is and errors.As.
func (e *NotAnnouncedError) Unwrap() []error { return e.Errs }

func (p *Publisher) publish(msgs []*message.Message) error {
	if err := p.pub.Publish(p.topic, msgs...); err != nil {
		return fmt.Errorf("publishing %d messages of due ids to %s: %w", len(msgs), p.topic, err)
	}
	return nil
}
