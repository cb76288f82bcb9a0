package nativedelay

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// prober sends Verify's probe messages: mandatory, confirmed, with a TTL of 0 so that a probe
// that reaches a level queue leaves it at once, and marked so that nobody mistakes one for a
// message of an application.
type prober struct {
	s *Sender
}

// probeHeader marks probe messages.
const probeHeader = "timeoutmill-probe"

func newProber(conn *amqp.Connection) (*prober, error) {
	s, err := NewSender(conn)
	if err != nil {
		return nil, err
	}
	return &prober{s: s}, nil
}

// routes reports whether a probe published to exchange with key reaches a queue.
func (p *prober) routes(ctx context.Context, exchange, key string) (bool, error) {
	results, err := p.s.Send(ctx, []Outgoing{{Exchange: exchange, Key: key, Msg: amqp.Publishing{
		MessageId:  probeHeader, // a return is matched by exchange and key; a key can take all of a short string's 255 bytes
		Expiration: "0",
		Headers:    amqp.Table{probeHeader: true},
	}}})
	if err != nil {
		return false, err
	}
	switch {
	case results[0] == nil:
		return true, nil
	case errors.Is(results[0], ErrUnroutable):
		return false, nil
	}
	return false, fmt.Errorf("probe to exchange %s: %w", exchange, results[0])
}

func (p *prober) close() { p.s.Close() }
