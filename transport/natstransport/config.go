package natstransport

import (
	"cmp"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Defaults of Config.
const (
	defaultDurable   = "timeoutmill"
	defaultConsumers = 1
	defaultAckWait   = 30 * time.Second
	defaultReplicas  = 1
)

const (
	maxConsumers = 256
	maxReplicas  = 5 // JetStream's own limit
)

// Config configures a Publisher and a Subscriber on one NATS server or cluster with JetStream.
type Config struct {
	// URL of the server: nats://[user:password@]host:port, or tls://, or several joined by
	// commas (a cluster). Required. Its password never appears in errors.
	URL string

	// Durable names the durable consumers and their deliver group (see the package
	// documentation). Defaults to "timeoutmill". Instances of one endpoint must share it.
	Durable string

	// Consumers is how many messages of one subscription may be handled at once: each is a
	// member of the deliver group, handed one message at a time. Defaults to 1.
	Consumers int

	// MaxAckPending is how many messages the durable consumer hands out, to all instances
	// together, before waiting for acknowledgements; it is set when the consumer is created.
	// Defaults to 8 per consumer (8 × Consumers). A message handed out waits in the client until a
	// consumer is free, and one that waits past AckWait is delivered again: JetStream's default
	// of 1,000 made a backlog deliver itself twice.
	MaxAckPending int

	// AckWait is how long a message handed out may stay unacknowledged before the server
	// delivers it again (a consumer that stopped or crashed). Defaults to 30 s. A message whose
	// handling takes longer is handled twice.
	AckWait time.Duration

	// Replicas is how many servers of a cluster keep each stream this package creates (its
	// consumers take the stream's): 3 in a cluster of three, so that the streams survive the loss
	// of any one server (another leads, nothing acknowledged is lost). Defaults to 1, what a
	// single server needs; JetStream allows 1 to 5, and no more than the cluster has servers. A
	// stream that exists already is used as it is, with its own replicas.
	Replicas int
}

func (c *Config) setDefaults() {
	c.Durable = cmp.Or(c.Durable, defaultDurable)
	c.Consumers = cmp.Or(c.Consumers, defaultConsumers)
	c.AckWait = cmp.Or(c.AckWait, defaultAckWait)
	c.MaxAckPending = cmp.Or(c.MaxAckPending, 8*c.Consumers)
	c.Replicas = cmp.Or(c.Replicas, defaultReplicas)
}

// Validate reports the first setting that cannot work, after defaults.
func (c Config) Validate() error {
	c.setDefaults()
	if c.URL == "" {
		return fmt.Errorf("%w: natstransport: URL is required", ErrInvalidConfig)
	}
	for _, u := range strings.Split(c.URL, ",") {
		parsed, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			return fmt.Errorf("%w: natstransport: URL is not a URL", ErrInvalidConfig)
		}
		switch parsed.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("%w: natstransport: URL scheme %q: expected nats://, tls://, ws:// or wss://", ErrInvalidConfig, parsed.Scheme)
		}
	}
	switch {
	case c.Consumers < 0 || c.Consumers > maxConsumers:
		return fmt.Errorf("%w: natstransport: Consumers must be between 1 and %d, got %d", ErrInvalidConfig, maxConsumers, c.Consumers)
	case c.MaxAckPending < 0:
		return fmt.Errorf("%w: natstransport: MaxAckPending must not be negative, got %d", ErrInvalidConfig, c.MaxAckPending)
	case c.AckWait < 0:
		return fmt.Errorf("%w: natstransport: AckWait must not be negative, got %s", ErrInvalidConfig, c.AckWait)
	case c.Replicas < 1 || c.Replicas > maxReplicas:
		return fmt.Errorf("%w: natstransport: Replicas must be between 1 and %d, got %d", ErrInvalidConfig, maxReplicas, c.Replicas)
	case StreamName(c.Durable) != c.Durable:
		return fmt.Errorf("%w: natstransport: Durable %q may hold only letters, digits, '-' and '_'", ErrInvalidConfig, c.Durable)
	}
	return nil
}

// StreamName is the name of the stream created for topic: topic with every character other than
// ASCII letters, digits, '-' and '_' replaced by '_'.
func StreamName(topic string) string {
	b := []byte(topic)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// ConsumerName is the name of the durable consumer a subscription to topic uses.
func (c Config) ConsumerName(topic string) string {
	c.setDefaults()
	return StreamName(c.Durable + "_" + topic)
}
