package nats

import (
	"cmp"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
	"github.com/timeoutmill/timeoutmill/internal/connect"
)

// ErrInvalidConfig is wrapped by every configuration error of this package. It is the same
// value in every package of the module: errors.Is with it matches them all.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Defaults of Config.
const (
	DefaultStream        = "timeoutmill_schedules"
	DefaultSubjectPrefix = "timeoutmill.schedules"
	DefaultDialTimeout   = 10 * time.Second
	DefaultAckTimeout    = 30 * time.Second

	defaultReplicas       = 1
	defaultConnectionName = "timeoutmill native"
	defaultMaxPending     = 4096
)

// Config configures a Publisher and the commands that set up and check the schedule stream.
type Config struct {
	// URL of the server: nats://[user:password@]host:port, or tls://, or the URLs of several
	// servers of a cluster joined by commas. Required. Its password never appears in errors.
	URL string

	// Stream names the JetStream stream that keeps the schedules and captures the destination
	// subjects (see the package documentation). Defaults to "timeoutmill_schedules". Every
	// sender and the setup must agree on it.
	Stream string

	// SubjectPrefix starts the subject of each schedule: PREFIX.<message id>. Defaults to
	// "timeoutmill.schedules". The stream captures PREFIX.>; no destination may start with it.
	SubjectPrefix string

	// Replicas is how many servers of a cluster keep the stream, set when Setup creates or
	// updates it. Defaults to 1; 3 on a cluster.
	Replicas int

	// ConnectionName names the Publisher's connection on the server. Defaults to
	// "timeoutmill native".
	ConnectionName string

	// DialTimeout bounds opening the connection. Defaults to 10 s.
	DialTimeout time.Duration

	// AckTimeout bounds the wait for JetStream's acknowledgement of each message. Defaults to
	// 30 s.
	AckTimeout time.Duration

	// MaxPending is how many messages one Publish or Send may have sent and not yet
	// acknowledged. Defaults to 4096.
	MaxPending int
}

func (c *Config) setDefaults() {
	c.Stream = cmp.Or(c.Stream, DefaultStream)
	c.SubjectPrefix = cmp.Or(c.SubjectPrefix, DefaultSubjectPrefix)
	c.Replicas = cmp.Or(c.Replicas, defaultReplicas)
	c.ConnectionName = cmp.Or(c.ConnectionName, defaultConnectionName)
	c.DialTimeout = cmp.Or(c.DialTimeout, DefaultDialTimeout)
	c.AckTimeout = cmp.Or(c.AckTimeout, DefaultAckTimeout)
	c.MaxPending = cmp.Or(c.MaxPending, defaultMaxPending)
}

// Validate reports the first missing or impossible setting, after defaults. Its errors show the
// URL with the password replaced.
func (c Config) Validate() error {
	c.setDefaults()
	if c.URL == "" {
		return fmt.Errorf("%w: nats: URL is required (nats://host:4222)", ErrInvalidConfig)
	}
	for _, u := range strings.Split(c.URL, ",") {
		parsed, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			return fmt.Errorf("%w: nats: URL %s is not a URL", ErrInvalidConfig, connect.Redact(u))
		}
		switch parsed.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("%w: nats: URL scheme %q: expected nats://, tls://, ws:// or wss://", ErrInvalidConfig, parsed.Scheme)
		}
	}
	if !validStreamName(c.Stream) {
		return fmt.Errorf("%w: nats: Stream %q may hold only letters, digits, '-' and '_'", ErrInvalidConfig, c.Stream)
	}
	if err := validateSubject(c.SubjectPrefix); err != nil {
		return fmt.Errorf("%w: nats: SubjectPrefix: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("%w: nats: Replicas must be between 1 and 5, got %d", ErrInvalidConfig, c.Replicas)
	case c.DialTimeout < 0:
		return fmt.Errorf("%w: nats: DialTimeout must be positive, got %s", ErrInvalidConfig, c.DialTimeout)
	case c.AckTimeout < 0:
		return fmt.Errorf("%w: nats: AckTimeout must be positive, got %s", ErrInvalidConfig, c.AckTimeout)
	case c.MaxPending < 0:
		return fmt.Errorf("%w: nats: MaxPending must be positive, got %d", ErrInvalidConfig, c.MaxPending)
	}
	return nil
}

func validStreamName(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
