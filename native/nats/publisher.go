package nats

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

var (
	// ErrClosed is returned by a Publisher used after Close.
	ErrClosed = errors.New("nats: publisher is closed")
	// ErrStream is returned when the schedule stream is missing or cannot schedule: it does not
	// allow message schedules, does not capture the schedule subjects, or another stream
	// captures them. `timeoutmill native setup` (Setup) fixes it. Verify's errors wrap it too.
	ErrStream = errors.New("nats: schedule stream missing or wrong")
	// ErrRefused is returned for a message whose schedule the server refused, such as a due time
	// it cannot parse (after the year 9999). Nothing was kept.
	ErrRefused = errors.New("nats: the server refused the schedule")
	// ErrNotConfirmed is returned for a message the server did not acknowledge in time, or whose
	// acknowledgement was lost with the connection: it may or may not have been kept.
	ErrNotConfirmed = errors.New("nats: not acknowledged")
	// ErrNotScheduled is returned by Cancel when no schedule waits for the id: it fired already
	// (the message was delivered), was cancelled, or was never scheduled (a message published
	// without a due time, or with one already past, is delivered at once and has none).
	ErrNotScheduled = errors.New("nats: no pending schedule")
)

// Headers of JetStream's message schedules (nats-server 2.12 and later).
const (
	headerSchedule       = "Nats-Schedule"
	headerScheduleTarget = "Nats-Schedule-Target"
	headerPrefix         = "Nats-"
)

// Publisher is a Watermill publisher that delays messages in JetStream itself: each delayed
// message is stored in the schedule stream on a subject of its own, PREFIX.<id>, with an
// "@at" schedule at its due time to the nanosecond, and the server publishes it to its
// destination subject, in the same stream, when that time comes. A message is delayed when it is
// marked as timeouts.Publisher reads it (timeouts.DeliverAt, timeouts.DeliverAfter, Watermill's
// delay.Message); the topic is the destination subject. One without a due time, or with one
// already past, is published to its destination at once.
type Publisher struct {
	cfg    Config
	conn   *natsgo.Conn
	js     jetstream.JetStream
	logger watermill.LoggerAdapter
	now    func() time.Time

	// closeMu is held for reading by every call that uses the connection, for writing by Close.
	closeMu sync.RWMutex
	closed  bool

	// mu guards the stream's state as last read and the destinations it captures; it also
	// serializes the stream updates that add destinations.
	mu       sync.Mutex
	streamOK bool
	dests    map[string]struct{}
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher connects to the server. It does not create the schedule stream: run
// `timeoutmill native setup --transport nats://…` or call Setup once.
func NewPublisher(config Config, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	conn, err := natsgo.Connect(config.URL,
		natsgo.Name(config.ConnectionName),
		natsgo.Timeout(config.DialTimeout),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(500*time.Millisecond),
		// No buffering while disconnected: a publish fails at once rather than reach the stream
		// after Publish reported it failed.
		natsgo.ReconnectBufSize(-1),
	)
	if err != nil {
		return nil, fmt.Errorf("nats: connecting to %s: %w", connect.Redact(config.URL), connect.RedactError(err, config.URL))
	}
	js, err := jetstream.New(conn,
		jetstream.WithPublishAsyncMaxPending(config.MaxPending),
		jetstream.WithPublishAsyncTimeout(config.AckTimeout),
	)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	return &Publisher{
		cfg:    config,
		conn:   conn,
		js:     js,
		logger: logger.With(watermill.LogFields{"schedule_stream": config.Stream}),
		now:    time.Now,
		dests:  map[string]struct{}{},
	}, nil
}

// Publish publishes messages to the subject topic: each delayed one through a schedule, the
// others (and those already due) at once. It returns when JetStream has acknowledged every
// message, or an error: an unusable due time, header or topic before anything is sent; a message
// the server refused or did not acknowledge after. The first message's context bounds the call.
// Publishing is at least once: on an error, other messages of the call may have been kept.
//
// A message with the UUID of one whose schedule is still pending replaces that schedule (its due
// time, body and headers): one schedule per id.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	if len(messages) == 0 {
		return nil
	}
	now := p.now()
	out := make([]Delayed, len(messages))
	for i, msg := range messages {
		due, _, err := wireparse.Due(msg.Metadata, now)
		if err != nil {
			return fmt.Errorf("nats: message %s for %s: %w", msg.UUID, topic, err)
		}
		if _, keyed := msg.Metadata[wire.HeaderKey]; keyed {
			return fmt.Errorf("nats: message %s for %s: %w: native schedules cannot deduplicate by %s; schedule keyed messages with the timeout manager",
				msg.UUID, topic, wire.ErrInvalidHeader, wire.HeaderKey)
		}
		out[i] = Delayed{Destination: topic, Due: due, Message: msg}
	}
	results, err := p.Send(messages[0].Context(), now, out)
	for i, rerr := range results {
		if rerr != nil {
			return fmt.Errorf("nats: publishing message %s to %s: %w", messages[i].UUID, topic, rerr)
		}
	}
	return err
}

// Delayed is a message to deliver to the subject Destination when Due comes (at once when Due is
// zero or not after now).
type Delayed struct {
	Destination string
	Due         time.Time
	Message     *message.Message
}

// Send schedules each message for its destination, or publishes it there at once when it is
// due, and waits for JetStream's acknowledgements. results[i] is nil when the stream kept
// message i; otherwise it says why not (ErrInvalidID, ErrInvalidDestination, wire.ErrInvalidHeader,
// ErrRefused, ErrStream, ErrNotConfirmed), and that message may be sent again. err is set when
// Send could not go on (closed, no stream, ctx ended): messages without a result of nil may or
// may not have been kept then.
//
// Sending a message again is idempotent while its schedule is pending: the new schedule replaces
// the old one. A message sent at once carries its UUID as Nats-Msg-Id, so the stream drops a
// second copy within its duplicate window (2 minutes unless configured).
func (p *Publisher) Send(ctx context.Context, now time.Time, messages []Delayed) (results []error, err error) {
	results = make([]error, len(messages))
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return p.failAll(results, ErrClosed)
	}
	if err := p.checkStream(ctx); err != nil {
		return p.failAll(results, err)
	}
	var destinations []string
	for _, d := range messages {
		if !slices.Contains(destinations, d.Destination) {
			destinations = append(destinations, d.Destination)
		}
	}
	badDest := map[string]error{}
	for _, d := range destinations {
		if err := p.ensureDestination(ctx, d); err != nil {
			if !errors.Is(err, ErrInvalidDestination) {
				return p.failAll(results, err)
			}
			badDest[d] = err
		}
	}
	futures := make([]jetstream.PubAckFuture, len(messages))
	var sendErr error
	for i, d := range messages {
		if err := badDest[d.Destination]; err != nil {
			results[i] = err
			continue
		}
		msg, err := p.outgoing(now, d)
		if err != nil {
			results[i] = err
			continue
		}
		futures[i], err = p.js.PublishMsgAsync(msg, jetstream.WithStallWait(p.cfg.AckTimeout))
		if err != nil {
			sendErr = fmt.Errorf("nats: publishing: %w", err)
			for j := i; j < len(messages); j++ {
				if results[j] == nil {
					results[j] = fmt.Errorf("%w: %w", ErrNotConfirmed, err)
				}
			}
			break
		}
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			results[i] = p.classify(messages[i], err)
		case <-ctx.Done():
			results[i] = fmt.Errorf("%w: %w", ErrNotConfirmed, ctx.Err())
			if sendErr == nil {
				sendErr = ctx.Err()
			}
		}
	}
	return results, sendErr
}

func (p *Publisher) failAll(results []error, err error) ([]error, error) {
	for i := range results {
		results[i] = err
	}
	return results, err
}

// outgoing is d as the NATS message to publish: to its schedule subject with an "@at" schedule,
// or to its destination when it is due.
func (p *Publisher) outgoing(now time.Time, d Delayed) (*natsgo.Msg, error) {
	id := d.Message.UUID
	token, err := idToken(id)
	if err != nil {
		return nil, err
	}
	msg := &natsgo.Msg{Data: d.Message.Payload, Header: natsgo.Header{}}
	for k, v := range d.Message.Metadata {
		if wireparse.IsRoutingHeader(k) {
			continue // the timeout manager's routing headers mean nothing to the destination
		}
		if len(k) >= len(headerPrefix) && strings.EqualFold(k[:len(headerPrefix)], headerPrefix) {
			return nil, fmt.Errorf("%w: header %q: names starting with %q belong to JetStream, which would act on them or strip them",
				wire.ErrInvalidHeader, k, headerPrefix)
		}
		if !carriable(k, v) {
			k, v = natstransport.EncodedHeaderPrefix+base64.RawURLEncoding.EncodeToString([]byte(k)), base64.StdEncoding.EncodeToString([]byte(v))
		}
		msg.Header[k] = []string{v}
	}
	msg.Header[wnats.WatermillUUIDHdr] = []string{id}
	msg.Header[natsgo.ExpectedStreamHdr] = []string{p.cfg.Stream}
	if d.Due.IsZero() || !d.Due.After(now) {
		msg.Subject = d.Destination
		msg.Header[natsgo.MsgIdHdr] = []string{id}
		if !d.Due.IsZero() {
			msg.Header[wire.HeaderDue] = []string{wireparse.FormatExpire(wireparse.RoundUp(d.Due))}
		}
		return msg, nil
	}
	// The due time to the nanosecond, rounded up to wire.Precision as the stores keep it: the
	// server fires no earlier. nats.go's WithScheduleAt drops the fraction, up to a second early.
	due := wireparse.RoundUp(d.Due)
	msg.Subject = p.cfg.SubjectPrefix + "." + token
	msg.Header[wire.HeaderDue] = []string{wireparse.FormatExpire(due)}
	msg.Header[headerSchedule] = []string{"@at " + due.UTC().Format(time.RFC3339Nano)}
	msg.Header[headerScheduleTarget] = []string{d.Destination}
	return msg, nil
}

// carriable: NATS headers take printable ASCII names without ':' and values without line
// breaks, and drop the spaces a value starts with (natstransport encodes the others alike).
func carriable(name, value string) bool {
	if name == "" || strings.HasPrefix(name, natstransport.EncodedHeaderPrefix) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return !strings.ContainsAny(value, "\r\n") && !strings.HasPrefix(value, " ") && !strings.HasPrefix(value, "\t")
}

// JetStream's error codes this package tells apart.
const (
	codeStreamMismatch     = 10060
	codeSchedulesDisabled  = 10188
	codeSchedulePattern    = 10189
	codeScheduleTarget     = 10190
	codeStreamNotFound     = 10059
	codeMessageNotFound    = 10037
	codeStreamSubjectsOver = 10065
)

func apiCode(err error) jetstream.ErrorCode {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.ErrorCode
	}
	return 0
}

// classify turns JetStream's answer to the message d into this package's errors.
func (p *Publisher) classify(d Delayed, err error) error {
	switch apiCode(err) {
	case codeSchedulePattern:
		return fmt.Errorf("%w: due time %s: %w", ErrRefused, d.Due.UTC().Format(time.RFC3339Nano), err)
	case codeSchedulesDisabled:
		p.forgetStream()
		return fmt.Errorf("%w: stream %s does not allow message schedules (run `timeoutmill native setup`): %w", ErrStream, p.cfg.Stream, err)
	case codeScheduleTarget:
		p.forgetDestination(d.Destination)
		return fmt.Errorf("%w: %s: the schedule stream %s does not capture it: %w", ErrInvalidDestination, d.Destination, p.cfg.Stream, err)
	case codeStreamMismatch:
		p.forgetStream()
		p.forgetDestination(d.Destination)
		return fmt.Errorf("%w: the subject of message %s is captured by another stream than %s: %w", ErrStream, d.Message.UUID, p.cfg.Stream, err)
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, natsgo.ErrNoResponders) {
		p.forgetStream()
		return fmt.Errorf("%w: no stream answered (is %s there? `timeoutmill native verify`): %w", ErrNotConfirmed, p.cfg.Stream, err)
	}
	return fmt.Errorf("%w: %w", ErrNotConfirmed, err)
}

// Cancel deletes the pending schedule of the message with this UUID, so that it is never
// delivered. It returns ErrNotScheduled when none waits: the schedule fired already (the message
// was delivered or is being delivered), was cancelled, or never existed. A Cancel racing the
// schedule's firing may return nil while the message is delivered all the same: the server
// hands a schedule to its stream up to a few milliseconds before it removes it.
func (p *Publisher) Cancel(ctx context.Context, id string) error {
	token, err := idToken(id)
	if err != nil {
		return err
	}
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	stream, err := p.stream(ctx)
	if err != nil {
		return err
	}
	subject := p.cfg.SubjectPrefix + "." + token
	for range 3 { // a schedule replaced between the read and the delete moves to a new sequence
		msg, err := stream.GetLastMsgForSubject(ctx, subject)
		if apiCode(err) == codeMessageNotFound {
			return fmt.Errorf("%w: message %s", ErrNotScheduled, id)
		}
		if err != nil {
			return fmt.Errorf("nats: reading the schedule of message %s: %w", id, err)
		}
		err = stream.DeleteMsg(ctx, msg.Sequence)
		if err == nil {
			return nil
		}
		if apiCode(err) != codeMessageNotFound {
			return fmt.Errorf("nats: deleting the schedule of message %s: %w", id, err)
		}
	}
	return fmt.Errorf("%w: message %s", ErrNotScheduled, id)
}

// Close closes the connection, after the calls in flight. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if !p.closed {
		p.closed = true
		p.conn.Close()
	}
	return nil
}

// stream is the schedule stream, or ErrStream when it does not exist.
func (p *Publisher) stream(ctx context.Context) (jetstream.Stream, error) {
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: stream %s does not exist (run `timeoutmill native setup`)", ErrStream, p.cfg.Stream)
	}
	if err != nil {
		return nil, fmt.Errorf("nats: reading stream %s: %w", p.cfg.Stream, err)
	}
	return s, nil
}

// checkStream makes sure, once until an answer says it changed, that the schedule stream exists,
// allows message schedules and captures the schedule subjects.
func (p *Publisher) checkStream(ctx context.Context) error {
	p.mu.Lock()
	ok := p.streamOK
	p.mu.Unlock()
	if ok {
		return nil
	}
	s, err := p.stream(ctx)
	if err != nil {
		return err
	}
	info := s.CachedInfo()
	if problems := p.streamProblems(info.Config); len(problems) > 0 {
		return fmt.Errorf("%w: %s (run `timeoutmill native setup`)", ErrStream, strings.Join(problems, "; "))
	}
	p.mu.Lock()
	p.streamOK = true
	p.dests = map[string]struct{}{}
	p.mu.Unlock()
	return nil
}

func (p *Publisher) forgetStream() {
	p.mu.Lock()
	p.streamOK = false
	p.mu.Unlock()
}

func (p *Publisher) forgetDestination(d string) {
	p.mu.Lock()
	delete(p.dests, d)
	p.mu.Unlock()
}

// streamProblems lists what stops cfg, the schedule stream's configuration, from scheduling.
func (p *Publisher) streamProblems(cfg jetstream.StreamConfig) []string {
	var out []string
	if !cfg.AllowMsgSchedules {
		out = append(out, fmt.Sprintf("stream %s does not allow message schedules (AllowMsgSchedules; nats-server 2.12 or later)", cfg.Name))
	}
	if !captures(cfg.Subjects, p.schedulePattern()) {
		out = append(out, fmt.Sprintf("stream %s does not capture the schedule subjects %s", cfg.Name, p.schedulePattern()))
	}
	if cfg.Sealed {
		out = append(out, fmt.Sprintf("stream %s is sealed", cfg.Name))
	}
	return out
}

func (p *Publisher) schedulePattern() string { return p.cfg.SubjectPrefix + ".>" }

// ensureDestination makes sure the schedule stream captures destination, adding it to the
// stream's subjects when no stream captures it yet (once per destination).
func (p *Publisher) ensureDestination(ctx context.Context, destination string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.dests[destination]; ok {
		return nil
	}
	if err := validateDestination(destination, p.cfg.SubjectPrefix); err != nil {
		return err
	}
	for range 3 {
		s, err := p.stream(ctx)
		if err != nil {
			return err
		}
		cfg := s.CachedInfo().Config
		if captures(cfg.Subjects, destination) {
			p.dests[destination] = struct{}{}
			return nil
		}
		if err := p.capturedElsewhere(ctx, destination); err != nil {
			return err
		}
		cfg.Subjects = append(slices.Clone(cfg.Subjects), destination)
		_, err = p.js.UpdateStream(ctx, cfg)
		if err != nil && apiCode(err) != codeStreamSubjectsOver {
			return fmt.Errorf("nats: adding destination %s to stream %s: %w", destination, p.cfg.Stream, err)
		}
		// Another sender may have updated the stream at the same time: read it again.
	}
	return fmt.Errorf("nats: adding destination %s to stream %s: the stream kept changing", destination, p.cfg.Stream)
}

// capturedElsewhere is ErrInvalidDestination when another stream than the schedule stream
// captures destination: a schedule delivers only into its own stream.
func (p *Publisher) capturedElsewhere(ctx context.Context, destination string) error {
	name, err := p.js.StreamNameBySubject(ctx, destination)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("nats: finding the stream of %s: %w", destination, err)
	case name != p.cfg.Stream:
		return fmt.Errorf("%w: %s is captured by stream %s; a schedule delivers only into its own stream, %s "+
			"(consume %s from the schedule stream instead, or source it into %s: see the package documentation)",
			ErrInvalidDestination, destination, name, p.cfg.Stream, destination, name)
	}
	return nil
}

// CheckDestination reports, without changing anything, whether messages can be delivered to
// destination: nil when the schedule stream captures it or no stream does (the Publisher adds it
// to the schedule stream with its first message to it), an error wrapping ErrInvalidDestination
// when it is not a usable subject or another stream captures it.
func (p *Publisher) CheckDestination(ctx context.Context, destination string) error {
	if err := validateDestination(destination, p.cfg.SubjectPrefix); err != nil {
		return err
	}
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	return p.capturedElsewhere(ctx, destination)
}

// captures reports whether one of the subject filters captures subject.
func captures(filters []string, subject string) bool {
	for _, f := range filters {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

// subjectMatches reports whether filter, with NATS wildcards ('*' one token, '>' the rest),
// matches subject, which may itself be a filter ending with '>'.
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if f != "*" && f != st[i] {
			return false
		}
		if f == "*" && st[i] == ">" {
			return false
		}
	}
	return len(ft) == len(st)
}

// EnsureDestinations makes sure the schedule stream captures each destination subject, adding
// those no stream captures yet to its subjects (Publish does it before its first message to a
// destination). Call it, or `timeoutmill native setup --destination SUBJECT`, before consumers
// of a destination start: a natstransport Subscriber creates a stream of its own for a subject
// no stream captures, and a schedule cannot deliver into another stream than its own.
func (p *Publisher) EnsureDestinations(ctx context.Context, destinations ...string) error {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	if err := p.checkStream(ctx); err != nil {
		return err
	}
	for _, d := range destinations {
		if err := p.ensureDestination(ctx, d); err != nil {
			return err
		}
	}
	return nil
}
