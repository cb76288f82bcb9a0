package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
)

// ErrClosed is returned by a Publisher used after Close.
var ErrClosed = errors.New("amqptransport: publisher is closed")

// pooledChannel is a publishing channel in confirm mode, the connection it was opened on, and
// why the broker closed it, once it has.
type pooledChannel struct {
	ch     *amqp.Channel
	conn   *amqp.Connection
	closed *closeReason
}

// closeReason records the error a channel was closed with.
type closeReason struct {
	done chan struct{} // closed once err is set
	err  *amqp.Error   // nil when closed without one (by us, or with its connection)
}

func watchClose(ch *amqp.Channel) *closeReason {
	r := &closeReason{done: make(chan struct{})}
	notify := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		r.err = <-notify
		close(r.done)
	}()
	return r
}

// reason returns the error the broker closed ch with, or nil when ch is open or closed without
// one. amqp091-go hands the error to the close listeners before it fails the pending confirms, so
// a caller whose confirm failed with the channel finds it here after a moment at most.
func (c pooledChannel) reason() *amqp.Error {
	if !c.ch.IsClosed() {
		return nil
	}
	select {
	case <-c.closed.done:
		return c.closed.err
	case <-time.After(time.Second):
		return nil
	}
}

// channelPool lends out publishing channels on the current connection of an amqpconn.Conn. A
// channel is opened when first needed, and opened again when it was closed
// (by a channel error) or its connection was replaced (by a reconnect).
type channelPool struct {
	conn *amqpconn.Conn
	// slots holds one entry per channel the pool may have open: an empty one for a channel not
	// opened yet.
	slots   chan pooledChannel
	size    int
	closing chan struct{}
	once    sync.Once
}

func newChannelPool(conn *amqpconn.Conn, size int) *channelPool {
	p := &channelPool{conn: conn, slots: make(chan pooledChannel, size), size: size, closing: make(chan struct{})}
	for range size {
		p.slots <- pooledChannel{}
	}
	return p
}

// get waits for a free slot and returns an open channel in confirm mode on the current
// connection. Every channel got must be put back.
func (p *channelPool) get(ctx context.Context) (pooledChannel, error) {
	var c pooledChannel
	select {
	case <-p.closing:
		return pooledChannel{}, ErrClosed
	case <-ctx.Done():
		return pooledChannel{}, ctx.Err()
	case c = <-p.slots:
	}
	conn, err := currentConnection(p.conn)
	if c.ch != nil && !c.ch.IsClosed() && c.conn == conn {
		return c, nil
	}
	if c.ch != nil && !c.ch.IsClosed() {
		_ = c.ch.Close() // a channel of a replaced connection
	}
	if err != nil {
		p.slots <- pooledChannel{}
		return pooledChannel{}, err
	}
	if c, err = openChannel(conn); err != nil {
		p.slots <- pooledChannel{}
		return pooledChannel{}, err
	}
	return c, nil
}

// private opens a channel of the caller's own, outside the pool, which the caller closes.
func (p *channelPool) private() (pooledChannel, error) {
	conn, err := currentConnection(p.conn)
	if err != nil {
		return pooledChannel{}, err
	}
	return openChannel(conn)
}

// openChannel opens a publishing channel in confirm mode on conn.
func openChannel(conn *amqp.Connection) (pooledChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return pooledChannel{}, fmt.Errorf("opening a publishing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return pooledChannel{}, fmt.Errorf("putting the publishing channel in confirm mode: %w", err)
	}
	return pooledChannel{ch: ch, conn: conn, closed: watchClose(ch)}, nil
}

// put returns a channel got from get.
func (p *channelPool) put(c pooledChannel) {
	p.slots <- c
}

// close waits for every channel lent out to come back, then closes them all. get fails from the
// moment close is called.
func (p *channelPool) close() error {
	var errs []error
	p.once.Do(func() {
		close(p.closing)
		for range p.size {
			c := <-p.slots
			if c.ch != nil && !c.ch.IsClosed() {
				if err := c.ch.Close(); err != nil {
					errs = append(errs, err)
				}
			}
		}
	})
	return errors.Join(errs...)
}
