package rabbitmq

import (
	"crypto/tls"
	"fmt"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/internal/coalesce"
	"github.com/timeoutmill/timeoutmill/internal/configerr"
	"github.com/timeoutmill/timeoutmill/internal/nativedelay"

	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// ErrInvalidConfig is wrapped by every configuration error of this package. It is the same
// value in every package of the module: errors.Is with it matches them all.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Defaults of Config.
const (
	defaultConnectionName  = "timeoutmill native"
	defaultChannelPoolSize = 8
	DefaultDialTimeout     = 10 * time.Second
	defaultHeartbeat       = 10 * time.Second
)

// Config configures a Publisher and the commands that set up and check the delay infrastructure.
type Config struct {
	// URL of the broker: amqp://user:password@host:port/vhost, or amqps:// for TLS. Required. Its
	// password never appears in errors or logs. For a RabbitMQ cluster, the URLs of several of
	// its nodes separated by commas, as amqptransport.Config.URL: connections go to the first
	// node that answers and move to the next one when it is lost.
	URL string

	// Prefix starts the names of the delay exchanges and queues. Defaults to "timeoutmill". Every
	// sender and the setup must agree on it.
	Prefix string

	// QueueType is the kind of the level queues: Quorum (the default), with at-least-once
	// dead-lettering between levels, or Classic.
	QueueType QueueType

	// DestinationQueueArguments are the arguments of destination queues the Publisher creates
	// because they did not exist. Defaults to none: classic durable queues, as amqptransport
	// creates them. A queue that exists is used as it is.
	DestinationQueueArguments amqp.Table

	// ConnectionName names the Publisher's connections on the broker. Defaults to
	// "timeoutmill native".
	ConnectionName string

	// ChannelPoolSize is how many Publish calls may send at once, each on a channel of its own.
	// Defaults to 8.
	ChannelPoolSize int

	// TLS configures amqps:// connections. Defaults to the system's roots and the URL's host.
	TLS *tls.Config

	// DialTimeout bounds opening a connection. Defaults to 10 s.
	DialTimeout time.Duration

	// Reconnect paces reconnection after a connection was lost. Defaults to amqptransport's
	// pace: a first attempt after 0.5 s, then 1.5 times longer each time, at most 5 s apart.
	Reconnect *wamqp.ReconnectConfig
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = defaultPrefix
	}
	if c.QueueType == "" {
		c.QueueType = Quorum
	}
	if c.ConnectionName == "" {
		c.ConnectionName = defaultConnectionName
	}
	if c.ChannelPoolSize == 0 {
		c.ChannelPoolSize = defaultChannelPoolSize
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
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
	if c.URL == "" {
		return fmt.Errorf("%w: URL is required (amqp://user:password@host:port/vhost)", ErrInvalidConfig)
	}
	for _, u := range amqpconn.SplitURLs(c.URL) {
		if _, err := amqp.ParseURI(u); err != nil {
			return fmt.Errorf("%w: URL %s: %s", ErrInvalidConfig, amqpconn.Redact(u), redactText(err.Error(), u))
		}
	}
	if _, err := nativedelay.NewTopology(c.Prefix, c.QueueType); err != nil {
		return err
	}
	switch {
	case c.ChannelPoolSize < 0:
		return fmt.Errorf("%w: ChannelPoolSize must be positive, got %d", ErrInvalidConfig, c.ChannelPoolSize)
	case c.DialTimeout < 0:
		return fmt.Errorf("%w: DialTimeout must be positive, got %s", ErrInvalidConfig, c.DialTimeout)
	}
	return nil
}

// topology is the topology the config names, or its error.
func (c Config) topology() (nativedelay.Topology, error) {
	return nativedelay.NewTopology(c.Prefix, c.QueueType)
}

// transportConfig is the amqptransport configuration of the Publisher's declaring connection.
func (c Config) transportConfig() amqptransport.Config {
	return amqptransport.Config{
		URL:             c.URL,
		ConnectionName:  c.ConnectionName,
		ChannelPoolSize: 1,
		QueueArguments:  c.DestinationQueueArguments,
		TLS:             c.TLS,
		DialTimeout:     c.DialTimeout,
		Reconnect:       c.Reconnect,
	}
}

// amqpConfig is the amqp091-go configuration of a connection of this package.
func (c Config) amqpConfig(role string) amqp.Config {
	return amqp.Config{
		Heartbeat:       defaultHeartbeat,
		Locale:          "en_US",
		TLSClientConfig: c.TLS,
		Dial:            coalesce.Dial(amqp.DefaultDial(c.DialTimeout)), // many messages a system call; see internal/coalesce,
		Properties: amqp.Table{
			"connection_name": c.ConnectionName + " " + role,
			"product":         "timeoutmill native delay (amqp091-go)",
		},
	}
}
