// Package dispatcherqueue is the contract of an endpoint's TimeoutsDispatcher queue: each message
// carries the id of one due timeout as its payload (UTF-8, at most persistence.MaxIDLength
// bytes). The poller publishes ids there in batches; the dispatch satellite decodes them.
package dispatcherqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ErrMalformed is returned by Decode for a message that does not carry a usable timeout id.
var ErrMalformed = errors.New("dispatcherqueue: malformed message")

// NewMessage returns the message that announces the timeout id as due.
func NewMessage(id string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(id))
}

// Decode returns the timeout id a dispatcher message carries.
func Decode(msg *message.Message) (string, error) {
	id := string(msg.Payload)
	switch {
	case id == "":
		return "", fmt.Errorf("%w: empty payload, expected a timeout id", ErrMalformed)
	case len(id) > persistence.MaxIDLength:
		return "", fmt.Errorf("%w: payload of %d bytes is longer than a timeout id (%d)", ErrMalformed, len(id), persistence.MaxIDLength)
	case !utf8.ValidString(id):
		return "", fmt.Errorf("%w: payload is not valid UTF-8", ErrMalformed)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: payload %q contains a control character", ErrMalformed, id)
		}
	}
	return id, nil
}

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

// DefaultBatchSize is how many ids Publisher hands the underlying publisher in one call.
const DefaultBatchSize = 100

// maxParallelBatches bounds the calls one PublishDue makes to the underlying publisher at once.
// A publisher that waits for the broker's confirms (amqptransport) takes about a round trip per
// call whatever its size; side by side, the batches of a claim cost one round trip, not one each.
const maxParallelBatches = 4

// Publisher publishes due ids to one endpoint's dispatcher queue.
type Publisher struct {
	pub       message.Publisher
	topic     string
	batchSize int
}

// NewPublisher returns a Publisher for endpoint's dispatcher queue. batchSize <= 0 means
// DefaultBatchSize.
func NewPublisher(pub message.Publisher, endpoint string, batchSize int) *Publisher {
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	return &Publisher{pub: pub, topic: wire.DispatcherQueue(endpoint), batchSize: batchSize}
}

// Topic is the dispatcher queue's name.
func (p *Publisher) Topic() string { return p.topic }

// PublishDue publishes one message per id, batchSize messages per call to the underlying
// publisher (which Watermill requires to be safe for concurrent use), up to maxParallelBatches
// calls at once; the ids' order is not kept across batches. It returns once every call has
// returned. On error it returns a *NotAnnouncedError naming the ids of the failed calls, which
// the caller may publish again (a failed call may have published some of them: a retry can
// announce an id twice, which the dispatch satellite tolerates).
func (p *Publisher) PublishDue(ctx context.Context, ids []string) error {
	ctx = context.WithValue(ctx, announcementKey{}, true)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed NotAnnouncedError
		sem    = make(chan struct{}, maxParallelBatches)
	)
	publish := func(batch []string) {
		msgs := make([]*message.Message, 0, len(batch))
		for _, id := range batch {
			m := NewMessage(id)
			m.SetContext(ctx)
			msgs = append(msgs, m)
		}
		if err := p.publish(msgs); err != nil {
			mu.Lock()
			failed.IDs = append(failed.IDs, batch...)
			failed.Errs = append(failed.Errs, err)
			mu.Unlock()
		}
	}
	for start := 0; start < len(ids); start += p.batchSize {
		end := min(start+p.batchSize, len(ids))
		if end == len(ids) && len(sem) == 0 {
			// The last (or only) batch, with nothing else in flight: no goroutine needed.
			publish(ids[start:end])
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			publish(ids[start:end])
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
		return fmt.Errorf("publishing %d due ids to %s: %w", len(msgs), p.topic, err)
	}
	return nil
}
