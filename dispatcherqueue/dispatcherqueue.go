// Package dispatcherqueue is the contract of an endpoint's TimeoutsDispatcher queue (docs/wire.md).
// A message carries the ids of due timeouts as its payload, each UTF-8, at most
// persistence.MaxIDLength bytes, without control characters:
//
//   - without wire.HeaderDispatchIDs, the payload is one id (the original format, which older
//     pollers and other producers write);
//   - with it, the payload is that many ids (1 to MaxIDsPerMessage), each ended by a line feed.
//
// An older dispatch satellite, which knows only the first format, reads a many-id payload as an
// id containing a control character and sends the message to the error queue: its timeouts stay
// in the store and are claimed again when their lease ends, late but not lost. The poller
// therefore writes many ids per message only as far as the Publisher is told it may
// (timeouts.Config.AnnouncementIDs).
//
// The poller publishes ids there; the dispatch satellite decodes them.
package dispatcherqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ErrMalformed is returned by Decode for a message that does not carry usable timeout ids.
var ErrMalformed = errors.New("dispatcherqueue: malformed message")

// MaxIDsPerMessage bounds the ids one dispatcher message may carry.
const MaxIDsPerMessage = 1000

// NewMessage returns the message that announces the timeout id as due, in the one-id format.
func NewMessage(id string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(id))
}

// NewBatchMessage returns the message that announces the timeout ids as due: the one-id format
// for one id, otherwise the many-id format with wire.HeaderDispatchIDs.
func NewBatchMessage(ids []string) *message.Message {
	if len(ids) == 1 {
		return NewMessage(ids[0])
	}
	n := 0
	for _, id := range ids {
		n += len(id) + 1
	}
	payload := make([]byte, 0, n)
	for _, id := range ids {
		payload = append(payload, id...)
		payload = append(payload, '\n')
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.Metadata.Set(wire.HeaderDispatchIDs, strconv.Itoa(len(ids)))
	return msg
}

// Decode returns the timeout ids a dispatcher message carries: one, or, with
// wire.HeaderDispatchIDs, as many as that header says.
func Decode(msg *message.Message) ([]string, error) {
	count, batch := msg.Metadata[wire.HeaderDispatchIDs]
	if !batch {
		id := string(msg.Payload)
		if id == "" {
			return nil, fmt.Errorf("%w: empty payload, expected a timeout id", ErrMalformed)
		}
		if err := checkID(id); err != nil {
			return nil, err
		}
		return []string{id}, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || n > MaxIDsPerMessage {
		return nil, fmt.Errorf("%w: %s %q is not a count of ids from 1 to %d", ErrMalformed, wire.HeaderDispatchIDs, count, MaxIDsPerMessage)
	}
	payload := msg.Payload
	if !bytes.HasSuffix(payload, []byte{'\n'}) {
		return nil, fmt.Errorf("%w: a payload of %s ids must end with a line feed", ErrMalformed, count)
	}
	if got := bytes.Count(payload, []byte{'\n'}); got != n {
		return nil, fmt.Errorf("%w: %s says %d ids, the payload holds %d", ErrMalformed, wire.HeaderDispatchIDs, n, got)
	}
	ids := strings.Split(string(payload[:len(payload)-1]), "\n")
	for i, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("%w: id %d of %d is empty", ErrMalformed, i+1, n)
		}
		if err := checkID(id); err != nil {
			return nil, fmt.Errorf("id %d of %d: %w", i+1, n, err)
		}
	}
	return ids, nil
}

// DueBy returns the time by which the ids msg carries are due (wire.HeaderDispatchAt), or ok ==
// false when the message does not say. A value that is not an RFC 3339 time is ErrMalformed.
func DueBy(msg *message.Message) (at time.Time, ok bool, err error) {
	value, ok := msg.Metadata[wire.HeaderDispatchAt]
	if !ok {
		return time.Time{}, false, nil
	}
	at, err = wireparse.ParseTime(value)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: %s: %w", ErrMalformed, wire.HeaderDispatchAt, err)
	}
	return at, true, nil
}

// checkID checks one id read from a payload.
func checkID(id string) error {
	switch {
	case len(id) > persistence.MaxIDLength:
		return fmt.Errorf("%w: payload of %d bytes is longer than a timeout id (%d)", ErrMalformed, len(id), persistence.MaxIDLength)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: payload is not valid UTF-8", ErrMalformed)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: payload %q contains a control character", ErrMalformed, id)
		}
	}
	return nil
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
// writes only the one-id format. idsPerMessage is capped at MaxIDsPerMessage.
func NewPublisher(pub message.Publisher, endpoint string, batchSize, idsPerMessage int) *Publisher {
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	if idsPerMessage <= 0 {
		idsPerMessage = DefaultIDsPerMessage
	}
	idsPerMessage = min(idsPerMessage, MaxIDsPerMessage)
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

// PublishDue publishes the ids, due by dueBy (wire.HeaderDispatchAt; the zero time: due now, no
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
			m := NewBatchMessage(g)
			if !dueBy.IsZero() {
				m.Metadata.Set(wire.HeaderDispatchAt, wireparse.FormatExpire(dueBy))
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
