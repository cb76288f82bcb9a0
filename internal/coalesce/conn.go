// Package coalesce gathers the writes of many goroutines to one connection into few system calls.
//
// amqp091-go writes each published message (method, header and body frames) and each ack with a
// write system call of its own, holding the connection's lock meanwhile, and has no way to send
// several messages at once. With hundreds of messages in flight on a connection, those writes
// were the largest share of timeoutmill's CPU time, and the broker read as many small segments. A Conn takes
// a write into a buffer and returns; one goroutine of its own sends whatever has gathered while
// its previous write was in the kernel. An idle connection so writes at once, as before; a busy
// one sends many messages a system call. make bench's RabbitMQ backlogs measure the gain.
package coalesce

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// DefaultMaxPending bounds the bytes a Conn holds that the kernel has not taken: a writer beyond
// it waits, as it would in a write system call to a connection the peer does not read.
const DefaultMaxPending = 1 << 20

// closeWait bounds how long Close waits for what was written before it to be sent.
const closeWait = 5 * time.Second

// Conn is a net.Conn whose writes return once buffered; its own goroutine sends them in order.
// A failed send fails every later Write with its error and closes the connection, so that its
// reader fails too. Close sends what was written before it (for at most 5 s), then closes.
type Conn struct {
	net.Conn
	maxPending int

	mu      sync.Mutex
	changed *sync.Cond // pending grew, was taken, or the Conn failed or closed
	pending []byte     // written, not yet taken by the sender
	spare   []byte     // the sender's previous buffer, reused
	err     error      // why sending failed; every later Write returns it
	closed  bool
	sent    chan struct{} // closed when the sender has ended

	sends int // system calls made, for tests
}

// New starts sending conn's writes in batches. maxPending ≤ 0 means DefaultMaxPending.
func New(conn net.Conn, maxPending int) *Conn {
	if maxPending <= 0 {
		maxPending = DefaultMaxPending
	}
	c := &Conn{Conn: conn, maxPending: maxPending, sent: make(chan struct{})}
	c.changed = sync.NewCond(&c.mu)
	go c.send()
	return c
}

// Dial wraps dial (an amqp.Config's Dial, say) so that its connections coalesce their writes.
func Dial(dial func(network, addr string) (net.Conn, error)) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		conn, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		return New(conn, 0), nil
	}
}

// Write buffers p for the sender and returns len(p), or the error an earlier send failed with.
// It waits while more than the maximum is pending.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closed && len(c.pending) >= c.maxPending {
		c.changed.Wait()
	}
	switch {
	case c.err != nil:
		return 0, c.err
	case c.closed:
		return 0, net.ErrClosed
	}
	c.pending = append(c.pending, p...)
	c.changed.Broadcast()
	return len(p), nil
}

// send writes what is pending to the connection until the Conn is closed and nothing is left.
func (c *Conn) send() {
	defer close(c.sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.pending) == 0 && !c.closed {
			c.changed.Wait()
		}
		if len(c.pending) == 0 {
			return
		}
		out := c.pending
		c.pending = c.spare[:0]
		c.sends++
		c.changed.Broadcast() // room for writers waiting on a full buffer
		c.mu.Unlock()
		_, err := c.Conn.Write(out)
		c.mu.Lock()
		c.spare = out[:0]
		if err != nil {
			c.err = fmt.Errorf("coalesce: sending %d bytes: %w", len(out), err)
			c.pending = nil
			c.changed.Broadcast()
			_ = c.Conn.Close() // the reader learns of it now, not at the next heartbeat
			return
		}
		c.changed.Broadcast()
	}
}

// Close sends what was written before it, waiting at most 5 s, then closes the connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.changed.Broadcast()
	c.mu.Unlock()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-c.sent:
	case <-t.C:
	}
	return c.Conn.Close()
}
