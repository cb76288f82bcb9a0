package redistransport

import (
	"cmp"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Defaults of Config.
const (
	defaultConsumerGroup = "timeoutmill"
	defaultConsumers     = 1
	defaultClaimAfter    = 30 * time.Second
)

// maxConsumers bounds Config.Consumers: each consumer is a connection of its own.
const maxConsumers = 256

// Config configures a Publisher and a Subscriber on one Redis server.
type Config struct {
	// URL of the server: redis://[user:password@]host:port/db, or rediss:// for TLS (go-redis'
	// ParseURL, which also reads options such as ?dial_timeout=3s). Required. Its password never
	// appears in errors.
	URL string

	// ConsumerGroup is the consumer group every subscription reads its stream in. Defaults to
	// "timeoutmill". Instances of one endpoint must share it; a consumer of a destination stream
	// uses a group of its own.
	ConsumerGroup string

	// Consumers is how many messages of one subscription may be handled at once: each is a
	// consumer of the group on a connection of its own, handed one entry at a time. Defaults to 1.
	Consumers int

	// ClaimAfter is how long an entry handed to a consumer may stay unacknowledged before another
	// consumer of the group claims it (a consumer that stopped or crashed). Defaults to 30 s. An
	// entry whose handling takes longer is handled twice.
	ClaimAfter time.Duration
}

func (c *Config) setDefaults() {
	c.ConsumerGroup = cmp.Or(c.ConsumerGroup, defaultConsumerGroup)
	c.Consumers = cmp.Or(c.Consumers, defaultConsumers)
	c.ClaimAfter = cmp.Or(c.ClaimAfter, defaultClaimAfter)
}

// Validate reports the first setting that cannot work, after defaults.
func (c Config) Validate() error {
	c.setDefaults()
	if c.URL == "" {
		return fmt.Errorf("%w: redistransport: URL is required", ErrInvalidConfig)
	}
	if _, err := redis.ParseURL(c.URL); err != nil {
		return fmt.Errorf("%w: redistransport: URL: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.Consumers < 0 || c.Consumers > maxConsumers:
		return fmt.Errorf("%w: redistransport: Consumers must be between 1 and %d, got %d", ErrInvalidConfig, maxConsumers, c.Consumers)
	case c.ClaimAfter < 0:
		return fmt.Errorf("%w: redistransport: ClaimAfter must not be negative, got %s", ErrInvalidConfig, c.ClaimAfter)
	}
	return nil
}

func (c Config) client() (*redis.Client, error) {
	opts, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: redistransport: URL: %w", ErrInvalidConfig, err)
	}
	return redis.NewClient(opts), nil
}
