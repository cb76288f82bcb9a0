package nativedelay

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	// ErrUnroutable is returned for a message the broker returned because no binding routed it:
	// the delay infrastructure or a destination's binding is missing. The message was not kept.
	ErrUnroutable = errors.New("rabbitmq: message returned unroutable")
	// ErrNotConfirmed is returned for a message the broker refused (a negative publisher
	// confirm) or that it may or may not have taken (the channel closed before it confirmed).
	ErrNotConfirmed = errors.New("rabbitmq: message not confirmed by the broker")
)

// maxInFlight bounds the unconfirmed messages of one channel, and so the returns that can wait
// in its buffer: amqp091-go drops a return its listener does not take within 5 s.
const maxInFlight = 512

// Outgoing is one message to publish, mandatory, to an exchange.
type Outgoing struct {
	Exchange, Key string
	Msg           amqp.Publishing
}

// Sender publishes on one channel in confirm mode and tells which messages the broker took.
//
// RabbitMQ sends basic.return for an unroutable mandatory message before its basic.ack, on the
// same channel, and amqp091-go hands both over in that order from one goroutine: once a
// message's confirm has arrived, its return, if any, is in the buffer of returns.
type Sender struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  chan *amqp.Error
	reason  *amqp.Error // why the broker closed the channel, once known
}

func NewSender(conn *amqp.Connection) (*Sender, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: opening a publishing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: putting the publishing channel in confirm mode: %w", err)
	}
	return &Sender{
		conn:    conn,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, maxInFlight)),
		closed:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// Usable reports whether the Sender can publish on conn.
func (s *Sender) Usable(conn *amqp.Connection) bool {
	return s.conn == conn && !s.ch.IsClosed()
}

func (s *Sender) Close() {
	if !s.ch.IsClosed() {
		_ = s.ch.Close() // nothing is waiting on it; a failure leaves it closed anyway
	}
}

// Send publishes every message, mandatory, at most maxInFlight at a time, and waits for their
// confirms. results[i] is nil when the broker took message i, ErrUnroutable when it returned
// it, and ErrNotConfirmed (wrapped) when it refused it or its fate is unknown. err is set when
// the channel failed or ctx ended; the Sender must not be used again then.
func (s *Sender) Send(ctx context.Context, out []Outgoing) (results []error, err error) {
	results = make([]error, len(out))
	for start := 0; start < len(out); start += maxInFlight {
		end := min(start+maxInFlight, len(out))
		if err := s.sendChunk(ctx, out[start:end], results[start:end]); err != nil {
			for i := end; i < len(out); i++ {
				results[i] = fmt.Errorf("%w: not sent: %w", ErrNotConfirmed, err)
			}
			return results, err
		}
	}
	return results, nil
}

func (s *Sender) sendChunk(ctx context.Context, out []Outgoing, results []error) error {
	confirms := make([]*amqp.DeferredConfirmation, len(out))
	var failed error
	for i, o := range out {
		dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, o.Exchange, o.Key, true, false, o.Msg)
		if err != nil {
			failed = fmt.Errorf("publishing to exchange %s: %w", o.Exchange, s.closeReason(err))
			break
		}
		confirms[i] = dc
	}
	for i, dc := range confirms {
		if dc == nil {
			results[i] = fmt.Errorf("%w: not sent: %w", ErrNotConfirmed, failed)
			continue
		}
		acked, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			results[i] = fmt.Errorf("%w: no confirm before %w", ErrNotConfirmed, err)
			if failed == nil {
				failed = err
			}
		case !acked && s.ch.IsClosed():
			results[i] = fmt.Errorf("%w: the channel closed first: %w", ErrNotConfirmed, s.closeReason(amqp.ErrClosed))
			if failed == nil {
				failed = results[i]
			}
		case !acked:
			results[i] = fmt.Errorf("%w: the broker refused it (negative confirm)", ErrNotConfirmed)
		}
	}
	s.matchReturns(out, results)
	return failed
}

// matchReturns marks the messages the broker returned. A return names the exchange, routing key
// and message id; identical messages are matched in order.
func (s *Sender) matchReturns(out []Outgoing, results []error) {
	for {
		select {
		case r, ok := <-s.returns:
			if !ok {
				return // closed with the channel: every return it had was taken
			}
			for i, o := range out {
				if results[i] == nil && o.Exchange == r.Exchange && o.Key == r.RoutingKey && o.Msg.MessageId == r.MessageId {
					results[i] = fmt.Errorf("%w: exchange %s, routing key %s: %s", ErrUnroutable, r.Exchange, r.RoutingKey, r.ReplyText)
					break
				}
			}
		default:
			return
		}
	}
}

// closeReason is the broker's reason for closing the channel, when it closed it, or err.
func (s *Sender) closeReason(err error) error {
	if s.reason == nil {
		select {
		case reason, ok := <-s.closed:
			if ok && reason != nil {
				s.reason = reason
			}
		default:
		}
	}
	if s.reason != nil {
		return s.reason
	}
	return err
}
