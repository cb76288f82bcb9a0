package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
)

// ErrNotConnected is returned while the connection to the broker is down; it is being made again
// meanwhile.
var ErrNotConnected = errors.New("amqptransport: not connected to the broker")

// declarer makes sure queues exist before messages are published to them: RabbitMQ silently
// drops a message published to the default exchange for a queue that does not exist. It
// remembers what it declared on the current connection; a new connection (after a broker
// restart, which may have lost non-durable state) starts afresh.
type declarer struct {
	conn *amqpconn.Conn
	args amqp.Table

	mu       sync.Mutex
	on       *amqp.Connection
	declared map[string]struct{}
}

func newDeclarer(conn *amqpconn.Conn, args amqp.Table) *declarer {
	return &declarer{conn: conn, args: args, declared: map[string]struct{}{}}
}

// ensure declares those of queues not yet declared on the current connection, or all of them
// when force is set.
func (d *declarer) ensure(ctx context.Context, force bool, queues ...string) error {
	conn, err := currentConnection(d.conn)
	if err != nil {
		return err
	}
	d.mu.Lock()
	if d.on != conn {
		d.on, d.declared = conn, map[string]struct{}{}
	}
	var missing []string
	for _, q := range queues {
		if _, ok := d.declared[q]; force || !ok {
			missing = append(missing, q)
		}
	}
	d.mu.Unlock()

	for _, q := range missing {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("declaring queue %q: %w", q, err)
		}
		// Declared outside the lock: two goroutines may both declare a new queue, which is
		// harmless, and publishing to queues declared already never waits for a declaration.
		if err := declareQueue(conn, q, d.args); err != nil {
			return err
		}
		d.mu.Lock()
		if d.on == conn {
			d.declared[q] = struct{}{}
		}
		d.mu.Unlock()
	}
	return nil
}

// currentConnection is the live connection, or ErrNotConnected while it is made again or after
// it was closed.
func currentConnection(c *amqpconn.Conn) (*amqp.Connection, error) {
	conn, err := c.Current()
	switch {
	case errors.Is(err, amqpconn.ErrClosed):
		return nil, fmt.Errorf("%w: closed", ErrNotConnected)
	case err != nil:
		// Both sentinels: callers test for ours, the dispatch satellite for amqpconn's (a
		// failure it must not count as a forward attempt, see internal/connloss).
		return nil, fmt.Errorf("%w: %w", ErrNotConnected, err)
	}
	return conn, nil
}

// declareQueue makes sure queue exists. A queue that exists is used as it is, whatever its type
// and arguments (a passive declaration does not compare them; an active one would fail on any
// difference and so refuse a user's quorum queue); a missing one is created durable with args.
// Each declaration gets a channel of its own, as a failed one closes its channel.
func declareQueue(conn *amqp.Connection, queue string, args amqp.Table) error {
	err := onChannel(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	if err == nil {
		return nil
	}
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound {
		return fmt.Errorf("checking queue %q: %w", queue, err)
	}
	err = onChannel(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(queue, true, false, false, false, args)
		return err
	})
	if err != nil {
		return fmt.Errorf("declaring durable queue %q: %w", queue, err)
	}
	return nil
}

func onChannel(conn *amqp.Connection, use func(ch *amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	err = use(ch)
	if !ch.IsClosed() {
		_ = ch.Close() // the result of use is what counts; a channel that failed to close is gone anyway
	}
	return err
}
