// Package amqpconn keeps an AMQP connection to a broker open: it dials once, and whenever the
// broker closes the connection (a restart, a forced close) it dials again, backing off, until it
// succeeds or is closed. Users ask for the current connection each time they open a channel.
//
// The URL may name the several nodes of one RabbitMQ cluster, separated by commas (see
// SplitURLs): the first that answers is used, and a lost connection is made again to the next
// node in turn, so that the loss of one node moves its clients to another.
//
// It stands in for watermill-amqp's ConnectionWrapper, which reconnects with a data race (it
// replaces its connected channel and connection while IsConnected and Connection read them,
// unsynchronised), so that reconnection can be tested under the race detector.
package amqpconn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	// ErrNotConnected is returned by Current while the connection is being made again.
	ErrNotConnected = errors.New("amqpconn: reconnecting")
	// ErrClosed is returned by Current after Close.
	ErrClosed = errors.New("amqpconn: closed")
)

// Backoff paces the attempts to connect again: the first after Initial, each next Multiplier
// times longer, at most Max apart, each varied by up to ±Randomization of itself so that the
// clients of a restarted broker do not all come back at once.
type Backoff struct {
	Initial       time.Duration
	Multiplier    float64
	Max           time.Duration
	Randomization float64
}

// BackoffOf is the Backoff that watermill-amqp's ReconnectConfig describes, which the transports'
// configurations keep as their public type; nil is the zero Backoff (Dial's defaults).
func BackoffOf(r *wamqp.ReconnectConfig) Backoff {
	if r == nil {
		return Backoff{}
	}
	return Backoff{
		Initial: r.BackoffInitialInterval, Multiplier: r.BackoffMultiplier,
		Max: r.BackoffMaxInterval, Randomization: r.BackoffRandomizationFactor,
	}
}

// defaultInitial is Backoff.Initial when none is given.
const defaultInitial = 500 * time.Millisecond

// Conn is a connection that is made again when lost. Its methods are safe for concurrent use.
type Conn struct {
	urls    []string // one per node; Redact each before showing it
	config  amqp.Config
	backoff Backoff
	logger  watermill.LoggerAdapter

	mu      sync.Mutex
	conn    *amqp.Connection // nil while reconnecting
	node    int              // index in urls of the node conn is (or was last) connected to
	closed  bool
	closing chan struct{}
	done    chan struct{} // closed when the reconnecting goroutine has stopped
}

// Dial connects to url and keeps the connection up until Close. url is one AMQP URL, or several
// separated by commas (the nodes of one cluster, see SplitURLs), tried in order. The first
// attempt must succeed with one of them: a broker that cannot be reached now is an error, not a
// reason to wait.
func Dial(url string, config amqp.Config, backoff Backoff, logger watermill.LoggerAdapter) (*Conn, error) {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	if backoff.Initial <= 0 {
		backoff.Initial = defaultInitial
	}
	if backoff.Multiplier < 1 {
		backoff.Multiplier = 1
	}
	if backoff.Max < backoff.Initial {
		backoff.Max = backoff.Initial
	}
	urls := SplitURLs(url)
	conn, node, err := dialFirst(urls, config)
	if err != nil {
		return nil, err
	}
	c := &Conn{
		urls: urls, config: config, backoff: backoff, logger: logger,
		conn: conn, node: node, closing: make(chan struct{}), done: make(chan struct{}),
	}
	go c.keep(conn)
	return c, nil
}

// DialFirst connects once, without reconnecting, to the first node of url (one URL or a list,
// see SplitURLs) that answers: for commands that need a connection for a moment.
func DialFirst(url string, config amqp.Config) (*amqp.Connection, error) {
	conn, _, err := dialFirst(SplitURLs(url), config)
	return conn, err
}

// dialFirst connects to the first of urls that answers. With one URL its error is amqp091-go's
// own; with several it names each node's.
func dialFirst(urls []string, config amqp.Config) (*amqp.Connection, int, error) {
	if len(urls) == 1 {
		conn, err := amqp.DialConfig(urls[0], config)
		return conn, 0, err
	}
	var errs []error
	for i, u := range urls {
		conn, err := amqp.DialConfig(u, config)
		if err == nil {
			return conn, i, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", Redact(u), err))
	}
	return nil, 0, fmt.Errorf("no node of the cluster answered: %w", errors.Join(errs...))
}

// SplitURLs splits a list of AMQP URLs separated by commas. A comma separates two URLs only where
// the next one starts (",amqp://" or ",amqps://"), so a comma inside a password or a vhost is
// kept. Spaces around the URLs are dropped.
func SplitURLs(list string) []string {
	var urls []string
	rest := list
	for {
		cut := nextURL(rest)
		if cut < 0 {
			break
		}
		if u := strings.TrimSpace(rest[:cut]); u != "" {
			urls = append(urls, u)
		}
		rest = rest[cut+1:]
	}
	if u := strings.TrimSpace(rest); u != "" || len(urls) == 0 {
		urls = append(urls, u)
	}
	return urls
}

// nextURL is the index of the comma before the next URL of list, or -1.
func nextURL(list string) int {
	for i := 0; i < len(list); i++ {
		if list[i] != ',' {
			continue
		}
		next := strings.ToLower(strings.TrimLeft(list[i+1:], " "))
		if strings.HasPrefix(next, "amqp://") || strings.HasPrefix(next, "amqps://") {
			return i
		}
	}
	return -1
}

// Current returns the live connection, ErrNotConnected while it is being made again, or ErrClosed.
func (c *Conn) Current() (*amqp.Connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrClosed
	case c.conn == nil || c.conn.IsClosed():
		return nil, ErrNotConnected
	}
	return c.conn, nil
}

// Close stops reconnecting and closes the connection. It does not wait out the backoff between
// attempts; an attempt already dialling ends first (bounded by the amqp.Config's Dial, which
// amqp091-go gives no context). It is safe to call more than once.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closed = true
	conn := c.conn
	c.conn = nil
	close(c.closing)
	c.mu.Unlock()
	<-c.done
	if conn == nil || conn.IsClosed() {
		return nil
	}
	if err := conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("amqpconn: closing the connection: %w", err)
	}
	return nil
}

// keep waits for conn to close and connects again, until Close.
func (c *Conn) keep(conn *amqp.Connection) {
	defer close(c.done)
	for {
		lost := conn.NotifyClose(make(chan *amqp.Error, 1))
		select {
		case <-c.closing:
			return
		case err := <-lost:
			c.mu.Lock()
			if c.conn == conn {
				c.conn = nil
			}
			c.mu.Unlock()
			c.logger.Error("The broker closed the connection; connecting again", errOrClosed(err), nil)
		}
		if conn = c.reconnect(); conn == nil {
			return
		}
	}
}

// reconnect dials until it succeeds, and publishes the new connection; nil when closed meanwhile.
// Each attempt goes to the next node of the list, starting with the one after the node lost.
func (c *Conn) reconnect() *amqp.Connection {
	wait := c.backoff.Initial
	c.mu.Lock()
	node := c.node
	c.mu.Unlock()
	for attempt := 1; ; attempt++ {
		timer := time.NewTimer(jitter(wait, c.backoff.Randomization))
		select {
		case <-c.closing:
			timer.Stop()
			return nil
		case <-timer.C:
		}
		node = (node + 1) % len(c.urls)
		conn, err := amqp.DialConfig(c.urls[node], c.config)
		if err != nil {
			c.logger.Info("Connecting again failed; retrying", watermill.LogFields{"attempt": attempt, "node": Redact(c.urls[node]), "err": RedactError(err, c.urls[node]).Error()})
			wait = min(time.Duration(float64(wait)*c.backoff.Multiplier), c.backoff.Max)
			continue
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = conn.Close()
			return nil
		}
		c.conn, c.node = conn, node
		c.mu.Unlock()
		c.logger.Info("Connected again", watermill.LogFields{"attempts": attempt, "node": Redact(c.urls[node])})
		return conn
	}
}

// jitter varies d by up to ±factor of itself.
func jitter(d time.Duration, factor float64) time.Duration {
	if factor <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + factor*(2*rand.Float64()-1)))
}

func errOrClosed(err *amqp.Error) error {
	if err == nil {
		return amqp.ErrClosed
	}
	return err
}
