package amqptransport

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/internal/coalesce"
	"github.com/timeoutmill/timeoutmill/internal/configerr"
)

// ErrInvalidConfig is wrapped by every configuration error of this package. It is the same
// value in every package of the module: errors.Is with it matches them all.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Defaults of Config.
const (
	defaultConnectionName  = "timeoutmill"
	defaultChannelPoolSize = 8
	defaultPrefetchCount   = 16
	defaultDialTimeout     = 10 * time.Second
	DefaultHeartbeat       = 10 * time.Second
	defaultCloseTimeout    = 30 * time.Second
)

// Config configures a Publisher and a Subscriber on one RabbitMQ broker (any AMQP 0-9-1 broker).
type Config struct {
	// URL of the broker: amqp://user:password@host:port/vhost, or amqps:// for TLS. Required.
	// Its password never appears in errors or logs (see Redact).
	//
	// For a RabbitMQ cluster, the URLs of several of its nodes separated by commas
	// ("amqp://u:p@node1:5672/,amqp://u:p@node2:5672/"): each connection is made to the first
	// node that answers, and when it is lost (the node stops) it is made again to the next node
	// in turn. Declare the queues as quorum queues (QueueArguments) so that they survive the loss
	// of a node.
	URL string

	// ConnectionName names the connections in RabbitMQ's management UI and rabbitmqctl
	// list_connections: "<ConnectionName> publisher" and "<ConnectionName> subscriber".
	// Defaults to "timeoutmill".
	ConnectionName string

	// ChannelPoolSize is how many channels the Publisher keeps open, and so how many Publish
	// calls may send at once. Defaults to 8. A Publish call sends its messages on one channel,
	// hands the channel on, and then waits for their publisher confirms together; a call waiting
	// for confirms holds no channel, so any number may wait at once.
	ChannelPoolSize int

	// PrefetchCount is how many unacknowledged messages the broker sends ahead to each
	// subscription. Defaults to 16: enough to hide the round trip between an ack and the next
	// delivery, small enough that competing instances of an endpoint share a backlog fairly (a
	// prefetched message waits for the instance that holds it).
	PrefetchCount int

	// Consumers is how many messages of one subscription may be handled at once. A subscription
	// is one channel that hands out up to Consumers messages without waiting for acks (the broker
	// sends Consumers + PrefetchCount ahead) and sends their acks back as multiple-acks where it
	// can. Defaults to 1: the next message is handed over only after the previous one was acked
	// or nacked, in queue order (as watermill-amqp's subscription does); above 1, in no
	// particular order. The timeout manager's satellites need no order and batch
	// what they are handed at once, so a service gives them many.
	Consumers int

	// CloseTimeout is how long closing a subscription with Consumers above 1 waits for the
	// messages it handed out to be acked or nacked, so that a handler finishing during a
	// shutdown has its ack delivered rather than its message delivered again; the broker
	// requeues whatever is still unsettled after it. Defaults to 30 s.
	CloseTimeout time.Duration

	// TransientAnnouncements publishes the poller's announcements of due timeout ids (the
	// messages of E.TimeoutsDispatcher, in the format of package dispatcherqueue) as transient
	// messages, which the broker confirms without writing them to disk first: sooner than
	// persistent ones, and less disk work on one of the three broker hops of every delayed
	// message, so a backlog drains faster (make bench's RabbitMQ + PostgreSQL backlog shows it).
	// An announcement is only a hint:
	// the store keeps the timeout, and an announcement lost with a broker restart is made again
	// when the claim's lease runs out (timeouts.Config.ClaimLease, 1 min by default), so such a
	// timeout can then be late by up to the lease, never lost nor early. Defaults to false:
	// announcements are persistent like every other message, so that a broker restart costs a
	// due timeout the restart's length rather than a lease. Quorum queues keep every message on
	// disk either way.
	TransientAnnouncements bool

	// QueueArguments are the arguments of the queues this package creates, for example
	// amqp.Table{"x-queue-type": "quorum"}. Defaults to none: classic durable queues. A queue that
	// exists already is used as it is, whatever its arguments.
	QueueArguments amqp.Table

	// TLS configures amqps:// connections. Defaults to the system's roots and the URL's host.
	TLS *tls.Config

	// DialTimeout bounds opening a connection. Defaults to 10 s.
	DialTimeout time.Duration

	// Heartbeat is how often the client and the broker tell each other they are alive (the
	// broker may ask for less often; the shorter of the two wins). A connection that hears
	// nothing for three heartbeats is closed and made again, so a broker that stopped answering
	// (its packets dropped by a partition or a firewall rather than refused) is noticed within
	// about three times this, and calls waiting on that connection end. Defaults to 10 s.
	// RabbitMQ advises against values under a few seconds on a loaded network.
	Heartbeat time.Duration

	// Reconnect paces reconnection after the connection was lost (a broker restart), which is
	// retried for as long as the Publisher or Subscriber is open (internal/amqpconn). Defaults to
	// a first attempt after 0.5 s, then 1.5 times longer each time, at most 5 s apart, each ±50 %.
	Reconnect *wamqp.ReconnectConfig
}

// maxConsumers bounds Config.Consumers: each consumer is a channel, and channels per connection
// are limited (2047 by default on RabbitMQ).
const maxConsumers = 256

func (c *Config) setDefaults() {
	if c.ConnectionName == "" {
		c.ConnectionName = defaultConnectionName
	}
	if c.ChannelPoolSize == 0 {
		c.ChannelPoolSize = defaultChannelPoolSize
	}
	if c.Consumers == 0 {
		c.Consumers = 1
	}
	if c.PrefetchCount == 0 {
		c.PrefetchCount = defaultPrefetchCount
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = defaultCloseTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Reconnect == nil {
		c.Reconnect = &wamqp.ReconnectConfig{
			BackoffInitialInterval:     500 * time.Millisecond,
			BackoffRandomizationFactor: 0.5,
			BackoffMultiplier:          1.5,
			BackoffMaxInterval:         5 * time.Second,
		}
	}
}

// Validate reports the first missing or impossible setting. Its errors show the URL with the
// password replaced.
func (c Config) Validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.URL == "" {
		return invalid("URL is required (amqp://user:password@host:port/vhost)")
	}
	for _, u := range amqpconn.SplitURLs(c.URL) {
		if _, err := amqp.ParseURI(u); err != nil {
			return invalid("URL %s: %w", amqpconn.Redact(u), amqpconn.RedactError(err, u))
		}
	}
	switch {
	case c.ChannelPoolSize < 0:
		return invalid("ChannelPoolSize must be positive, got %d", c.ChannelPoolSize)
	case c.PrefetchCount < 0:
		return invalid("PrefetchCount must be positive, got %d", c.PrefetchCount)
	case c.PrefetchCount > 65535:
		return invalid("PrefetchCount must be at most 65535 (AMQP's limit), got %d", c.PrefetchCount)
	case c.Consumers < 0:
		return invalid("Consumers must be positive, got %d", c.Consumers)
	case c.Consumers > maxConsumers:
		return invalid("Consumers must be at most %d, got %d", maxConsumers, c.Consumers)
	case c.CloseTimeout < 0:
		return invalid("CloseTimeout must be positive, got %s", c.CloseTimeout)
	case c.DialTimeout < 0:
		return invalid("DialTimeout must be positive, got %s", c.DialTimeout)
	case c.Heartbeat < 0:
		return invalid("Heartbeat must be positive, got %s", c.Heartbeat)
	}
	return nil
}

// amqpConfig is the connection of one role ("publisher" or "subscriber").
func (c Config) amqpConfig(role string) amqp.Config {
	return amqp.Config{
		Heartbeat:       cmp.Or(c.Heartbeat, DefaultHeartbeat),
		Locale:          "en_US",
		TLSClientConfig: c.TLS,
		Dial:            coalesce.Dial(amqp.DefaultDial(c.DialTimeout)), // many messages a system call; see internal/coalesce
		Properties: amqp.Table{
			"connection_name": c.ConnectionName + " " + role,
			"product":         "timeoutmill (amqp091-go)",
		},
	}
}

// backoff paces reconnection as Reconnect says.
func (c Config) backoff() amqpconn.Backoff { return amqpconn.BackoffOf(c.Reconnect) }
