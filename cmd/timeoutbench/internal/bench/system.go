package bench

import (
	"context"
	"io"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Env is where the servers are and what a run may use. Empty fields mean the server is not
// available: the scenarios that need it are shown as not run.
type Env struct {
	// AMQPURL is a RabbitMQ the run may create queues and exchanges on.
	AMQPURL string
	// PostgresDSN is a PostgreSQL database the run may create tables and schemas in.
	PostgresDSN string
	// RedisURL is a Redis the run may create streams on.
	RedisURL string
	// NATSURL is a NATS server with JetStream the run may create streams on.
	NATSURL string
	// TempDir holds SQLite files.
	TempDir string
	// Timeoutmill is the path of a built cmd/timeoutmill, run as the service of the scale
	// scenario.
	Timeoutmill string
	// Logger receives the systems' logs.
	Logger watermill.LoggerAdapter
	// Progress receives a line as each scenario starts and ends. Defaults to none.
	Progress io.Writer
}

func (e Env) logger() watermill.LoggerAdapter {
	if e.Logger == nil {
		return watermill.NopLogger{}
	}
	return e.Logger
}

// Rig is one System set up to deliver delayed messages to one destination.
type Rig struct {
	// Mark makes msg due at due, the way a user of the mechanism would.
	Mark func(msg *message.Message, due time.Time)
	// Publish sends delayed messages for topic.
	Publish func(topic string, msgs ...*message.Message) error
	// Arrivals are the messages delivered to the destination.
	Arrivals <-chan *message.Message
	// Pending counts the messages the mechanism holds, not yet due; nil when it cannot tell
	// (or holds them once Publish returned).
	Pending func(ctx context.Context) (int, error)
	// Close stops everything and removes what the rig created.
	Close func() error
	// Notes describe the configuration measured.
	Notes []string
}

// System is a delay mechanism under test.
type System struct {
	// Name labels its rows.
	Name string
	// Needs says which servers it needs: "rabbitmq", "postgres", "redis", "nats".
	Needs []string
	// SQL systems move every message through SQL tables and get Plan.BacklogSQL.
	SQL bool
	// Payload, when set, is the size of its messages' bodies, whatever Plan.Payload says.
	Payload int
	// Kinds, when set, are the only workloads run on it.
	Kinds []Kind
	// Reference marks a row that is not timeoutmill (a peer, or a raw path run through the
	// workloads): the targets read it as a yardstick and leave it out of timeoutmill's own.
	Reference bool
	// Open sets the system up to deliver to the queue or topic named destination.
	Open func(ctx context.Context, env Env, destination string) (*Rig, error)
}

// missing returns why s cannot run in env, or "".
func (s System) missing(env Env) string {
	for _, n := range s.Needs {
		switch {
		case n == "rabbitmq" && env.AMQPURL == "":
			return "no RabbitMQ (set TIMEOUTMILL_TEST_AMQP_URL or let timeoutbench start one)"
		case n == "postgres" && env.PostgresDSN == "":
			return "no PostgreSQL (set TIMEOUTMILL_TEST_POSTGRES_DSN or let timeoutbench start one)"
		case n == "redis" && env.RedisURL == "":
			return "no Redis (set TIMEOUTMILL_TEST_REDIS_URL or let timeoutbench start one)"
		case n == "nats" && env.NATSURL == "":
			return "no NATS (set TIMEOUTMILL_TEST_NATS_URL or let timeoutbench start one)"
		}
	}
	return ""
}
