package nativedelay

import (
	"context"
	"errors"
	"fmt"
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Unroutable counts the messages waiting in UnroutableQueue for one destination.
type Unroutable struct {
	// Destination is the queue the messages were delayed for, from their routing key; "" for
	// messages whose routing key is not one of the delay's.
	Destination string
	// Messages is how many wait.
	Messages int
	// QueueExists tells whether the destination queue exists now: replay delivers only to one
	// that does.
	QueueExists bool
	// Replayed is how many Replay delivered (0 for List).
	Replayed int
}

// unroutableSession takes every message of UnroutableQueue, one basic.get at a time, without
// acknowledging it: closing the channel gives back what was not acknowledged, so a message
// leaves the queue only once something acknowledges it, and a crash leaves it there.
type unroutableSession struct {
	t      Topology
	conn   *amqp.Connection
	ch     *amqp.Channel
	exists map[string]bool
}

func (t Topology) openUnroutable(conn *amqp.Connection) (*unroutableSession, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	return &unroutableSession{t: t, conn: conn, ch: ch, exists: map[string]bool{}}, nil
}

func (s *unroutableSession) close() { _ = s.ch.Close() }

// next is the next message of the queue, or ok false when none is left.
func (s *unroutableSession) next(ctx context.Context) (amqp.Delivery, bool, error) {
	if err := ctx.Err(); err != nil {
		return amqp.Delivery{}, false, err
	}
	d, ok, err := s.ch.Get(s.t.UnroutableQueue(), false)
	if err != nil {
		return amqp.Delivery{}, false, fmt.Errorf("rabbitmq: reading queue %s: %w", s.t.UnroutableQueue(), err)
	}
	return d, ok, nil
}

// queueExists reports whether queue exists, asking the broker once per session.
func (s *unroutableSession) queueExists(queue string) (bool, error) {
	if e, ok := s.exists[queue]; ok {
		return e, nil
	}
	err := OnChannel(s.conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	switch {
	case err == nil:
		s.exists[queue] = true
	case AMQPCode(err) == amqp.NotFound:
		s.exists[queue] = false
	default:
		return false, fmt.Errorf("rabbitmq: checking queue %s: %w", queue, err)
	}
	return s.exists[queue], nil
}

// destinationOf is the destination a message of UnroutableQueue was delayed for.
func destinationOf(d amqp.Delivery) string {
	_, dest, err := ParseRoutingKey(d.RoutingKey)
	if err != nil {
		return ""
	}
	return dest
}

// ListUnroutable counts the messages waiting in UnroutableQueue by destination, reading at most
// limit of them, and gives every one back. Destinations come sorted by name.
func (t Topology) ListUnroutable(ctx context.Context, conn *amqp.Connection, limit int) ([]Unroutable, error) {
	s, err := t.openUnroutable(conn)
	if err != nil {
		return nil, err
	}
	defer s.close()
	counts := map[string]*Unroutable{}
	for read := 0; read < limit; read++ {
		d, ok, err := s.next(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if err := s.count(counts, d); err != nil {
			return nil, err
		}
	}
	return sorted(counts), nil
}

func (s *unroutableSession) count(counts map[string]*Unroutable, d amqp.Delivery) error {
	dest := destinationOf(d)
	c, ok := counts[dest]
	if !ok {
		c = &Unroutable{Destination: dest}
		if dest != "" {
			exists, err := s.queueExists(dest)
			if err != nil {
				return err
			}
			c.QueueExists = exists
		}
		counts[dest] = c
	}
	c.Messages++
	return nil
}

func sorted(counts map[string]*Unroutable) []Unroutable {
	out := make([]Unroutable, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Unroutable) int {
		switch {
		case a.Destination < b.Destination:
			return -1
		case a.Destination > b.Destination:
			return 1
		}
		return 0
	})
	return out
}

// ReplayUnroutable delivers the messages waiting in UnroutableQueue to their destination queues,
// those of the destinations named in only (all when only is empty): each straight to its queue
// through the default exchange, mandatory and confirmed, with its body, properties and headers
// (but the user id, which the broker checks against the connection's user),
// and removed from UnroutableQueue once the broker has confirmed the delivery. A message whose
// queue is still missing, or whose routing key names no destination, stays, and so does every
// message should the replay stop half way; a message delivered just before a crash may be
// delivered twice. The counts say what was replayed and what waits.
func (t Topology) ReplayUnroutable(ctx context.Context, conn *amqp.Connection, only []string) ([]Unroutable, error) {
	s, err := t.openUnroutable(conn)
	if err != nil {
		return nil, err
	}
	defer s.close()
	sender, err := NewSender(conn)
	if err != nil {
		return nil, err
	}
	defer sender.Close()
	counts := map[string]*Unroutable{}
	for {
		d, ok, err := s.next(ctx)
		if err != nil {
			return sorted(counts), err
		}
		if !ok {
			break
		}
		if err := s.count(counts, d); err != nil {
			return sorted(counts), err
		}
		dest := destinationOf(d)
		c := counts[dest]
		if dest == "" || !c.QueueExists || len(only) > 0 && !slices.Contains(only, dest) {
			continue // stays: given back when the channel closes
		}
		results, err := sender.Send(ctx, []Outgoing{{Exchange: "", Key: dest, Msg: republish(d)}})
		if err != nil {
			return sorted(counts), fmt.Errorf("rabbitmq: delivering a message to %s: %w", dest, err)
		}
		if errors.Is(results[0], ErrUnroutable) {
			c.QueueExists = false // deleted meanwhile: it stays
			s.exists[dest] = false
			continue
		}
		if results[0] != nil {
			return sorted(counts), fmt.Errorf("rabbitmq: delivering a message to %s: %w", dest, results[0])
		}
		if err := d.Ack(false); err != nil {
			return sorted(counts), fmt.Errorf("rabbitmq: removing a delivered message from %s (it was delivered, and stays there too): %w", t.UnroutableQueue(), err)
		}
		c.Replayed++
	}
	return sorted(counts), nil
}

// republish is d as a message to publish again.
func republish(d amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers:         d.Headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}
