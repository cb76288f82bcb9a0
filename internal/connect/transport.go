package connect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	public "github.com/timeoutmill/timeoutmill/satellites"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/transport/redistransport"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

// TransportSchemes lists the transport URLs OpenTransport understands, for help texts.
const TransportSchemes = "amqp://user:pass@host:5672/vhost (or amqps://; a cluster's nodes separated by commas), " +
	"postgres://user:pass@host:5432/db (SQL queues), mysql://user:pass@host:3306/db (SQL queues on MariaDB/MySQL), " +
	"redis://user:pass@host:6379/0 (Redis Streams, or rediss://), nats://user:pass@host:4222 (NATS JetStream)"

// ServiceConsumers is how many messages of one queue the timeoutmill service handles at once on
// AMQP (amqptransport.Config.Consumers: one channel, the satellites batch what they are handed).
// Order is not kept either way (timeouts due together have none). A backlog drains faster with
// more (make bench's backlog measures it), but each consumer holds messages it was handed: 64
// takes most of 256's speed. What a kill -9 forwards again is bounded by the dispatch satellite's
// batches (satellites.MaxUnremoved), plus up to this many timeouts being stored.
const ServiceConsumers = 64

// ServiceSQLConsumers is how many consumers the timeoutmill service runs per queue on the SQL
// transports. More consumers drain a backlog faster but poll more while idle, since each looks at
// its table every PollInterval (acceptance/sql_measure_test.go measures both). 4 is the middle
// of that trade.
const ServiceSQLConsumers = 4

// ServiceSQLBatchSize is how many rows each of the service's SQL consumers locks and hands out in
// one transaction (sqltransport.Config.BatchSize). The satellites batch what they are handed, so a
// backlog costs one commit per hundred messages rather than per ten. Idle polling does not depend
// on it.
const ServiceSQLBatchSize = 100

// ServiceStreamConsumers is how many consumers the timeoutmill service runs per queue on Redis
// Streams and NATS JetStream. Each is handed one message at a time and waits for its ack's
// round trip, so a backlog drains with several; the satellites batch what they are handed at
// once. A crash can hand again up to this many messages it had in flight.
const ServiceStreamConsumers = 64

// Transport is a Pub/Sub with queue semantics for an endpoint's queues.
type Transport struct {
	Publisher  message.Publisher
	Subscriber message.Subscriber
	// DeclareEndpoint creates the endpoint's queues and the error queue (the installers); nil
	// where the transport needs none.
	DeclareEndpoint func(ctx context.Context, endpoint, errorQueue string) error
}

// Close closes the publisher and the subscriber.
func (t *Transport) Close() error {
	perr := t.Publisher.Close()
	serr := t.Subscriber.Close()
	if perr != nil {
		return perr
	}
	return serr
}

// OpenTransport connects to the broker or database a URL names:
//
//	amqp://user:pass@host:5672/vhost   RabbitMQ (amqps:// for TLS)
//	postgres://user:pass@host:5432/db?sslmode=disable   SQL queues, one table per queue (or postgresql://)
//	mysql://user:pass@host:3306/db   SQL queues on MariaDB/MySQL (or go-sql-driver's mysql://user:pass@tcp(host:3306)/db)
//	redis://user:pass@host:6379/0   Redis Streams, read in consumer group "timeoutmill" (rediss:// for TLS)
//	nats://user:pass@host:4222   NATS JetStream, durable consumers with deliver group "timeoutmill" (tls:// for TLS)
//
// Watermill's in-process GoChannel is refused: a separate process cannot share it. An
// unreachable server is an error worth retrying; a URL that cannot work is Permanent.
func OpenTransport(ctx context.Context, rawURL string, logger watermill.LoggerAdapter) (*Transport, error) {
	return OpenTransportWith(ctx, rawURL, TransportOptions{}, logger)
}

// TransportOptions are the settings of a transport beyond its URL.
type TransportOptions struct {
	// QueueType is the type of the queues created on RabbitMQ: "classic" (durable classic
	// queues; "" means classic) or "quorum" (replicated on the nodes of a cluster, which survive
	// the loss of a node). Queues that exist are used as they are. Other transports ignore it.
	QueueType string
	// Heartbeat is the AMQP heartbeat (amqptransport.Config.Heartbeat): a connection that hears
	// nothing for three of them is made again. Zero means the transport's default. Other
	// transports ignore it.
	Heartbeat time.Duration
	// Replicas is how many servers of a NATS cluster keep each stream created
	// (natstransport.Config.Replicas): 3 in a cluster of three; 0 means 1. Streams that exist
	// are used as they are. Other transports ignore it.
	Replicas int
}

// OpenTransportWith is OpenTransport with options. An amqp:// URL may list the nodes of a
// RabbitMQ cluster separated by commas (amqptransport.Config.URL), a nats:// URL the servers of
// a NATS cluster (natstransport.Config.URL).
func OpenTransportWith(ctx context.Context, rawURL string, opts TransportOptions, logger watermill.LoggerAdapter) (*Transport, error) {
	scheme, _, _ := strings.Cut(rawURL, ":")
	switch strings.ToLower(scheme) {
	case "amqp", "amqps":
		// Several consumers per queue let the satellites handle messages side by side: a backlog
		// of 2,000 due timeouts drained 3-4 times faster with 8 than with 1 (measured here).
		cfg := amqptransport.Config{URL: rawURL, Consumers: ServiceConsumers, Heartbeat: opts.Heartbeat}
		switch opts.QueueType {
		case "", "classic":
		case "quorum":
			cfg.QueueArguments = amqp.Table{"x-queue-type": "quorum"}
		default:
			return nil, fmt.Errorf("%w: queue type %q: expected classic or quorum", ErrInvalid, opts.QueueType)
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%w: transport: %w", ErrInvalid, err)
		}
		pub, sub, err := amqptransport.New(cfg, logger)
		if err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", Redact(rawURL), RedactError(err, rawURL))
		}
		return &Transport{Publisher: pub, Subscriber: sub, DeclareEndpoint: pub.DeclareEndpoint}, nil
	case "postgres", "postgresql":
		return openSQLTransport(ctx, rawURL, sqltransport.Config{Dialect: sqltransport.PostgreSQL, DSN: rawURL, Consumers: ServiceSQLConsumers, BatchSize: ServiceSQLBatchSize}, logger)
	case "mysql", "mariadb":
		dsn, err := MySQLDriverDSN(rawURL)
		if err != nil {
			return nil, err
		}
		return openSQLTransport(ctx, rawURL, sqltransport.Config{Dialect: sqltransport.MySQL, DSN: dsn, Consumers: ServiceSQLConsumers, BatchSize: ServiceSQLBatchSize}, logger)
	case "redis", "rediss":
		cfg := redistransport.Config{URL: rawURL, Consumers: ServiceStreamConsumers}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%w: transport %s: %w", ErrInvalid, Redact(rawURL), RedactError(err, rawURL))
		}
		pub, sub, err := redistransport.New(ctx, cfg, logger)
		if err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", Redact(rawURL), RedactError(err, rawURL))
		}
		return &Transport{Publisher: pub, Subscriber: sub, DeclareEndpoint: pub.DeclareEndpoint}, nil
	case "nats", "tls":
		cfg := natstransport.Config{URL: rawURL, Consumers: ServiceStreamConsumers, Replicas: opts.Replicas}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%w: transport %s: %w", ErrInvalid, Redact(rawURL), RedactError(err, rawURL))
		}
		pub, sub, err := natstransport.New(cfg, logger)
		if err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", Redact(rawURL), RedactError(err, rawURL))
		}
		return &Transport{Publisher: pub, Subscriber: sub, DeclareEndpoint: pub.DeclareEndpoint}, nil
	case "gochannel":
		return nil, fmt.Errorf("%w: transport %q: Watermill's GoChannel lives inside one process, so a separate timeoutmill process cannot share it; "+
			"embed timeouts.Manager in your program instead, or use %s", ErrUnsupported, rawURL, TransportSchemes)
	default:
		return nil, fmt.Errorf("%w: transport %q: expected %s", ErrUnsupported, Redact(rawURL), TransportSchemes)
	}
}

// openSQLTransport opens the SQL queues of cfg; rawURL is what the user gave, for errors.
func openSQLTransport(ctx context.Context, rawURL string, cfg sqltransport.Config, logger watermill.LoggerAdapter) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: transport %s: %w", ErrInvalid, Redact(rawURL), RedactError(err, rawURL))
	}
	pub, sub, err := sqltransport.New(ctx, cfg, logger)
	if errors.Is(err, sqltransport.ErrInvalidConfig) {
		return nil, fmt.Errorf("%w: transport %s: %w", ErrInvalid, Redact(rawURL), RedactError(err, rawURL))
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", Redact(rawURL), RedactError(err, rawURL))
	}
	return &Transport{Publisher: pub, Subscriber: sub, DeclareEndpoint: pub.DeclareEndpoint}, nil
}

// CheckExactlyOnce tells from the URLs alone, before anything is opened, whether forwarding and
// removing can share a transaction: only with the SQL transport and the store on PostgreSQL. It
// returns a Permanent error that says why not, without passwords. ExactlyOnceForwarder checks
// the rest once both are open: that they reach the same database.
func CheckExactlyOnce(transportURL, storeDSN string) error {
	refuse := func(why string, args ...any) error {
		return fmt.Errorf("%w: exactly once needs the transport and the store on one PostgreSQL database (a postgres:// transport "+
			"and a postgres:// store), so that forwarding a message and removing its timeout commit together: "+why,
			append([]any{ErrUnsupported}, args...)...)
	}
	transportScheme, _, _ := strings.Cut(transportURL, ":")
	switch strings.ToLower(transportScheme) {
	case "postgres", "postgresql":
	case "amqp", "amqps":
		return refuse("the transport %s is RabbitMQ, which cannot take part in a database transaction", Redact(transportURL))
	case "mysql", "mariadb":
		return refuse("the transport %s is MariaDB/MySQL", Redact(transportURL))
	case "redis", "rediss":
		return refuse("the transport %s is Redis, which cannot take part in a database transaction", Redact(transportURL))
	case "nats", "tls":
		return refuse("the transport %s is NATS, which cannot take part in a database transaction", Redact(transportURL))
	default:
		return refuse("the transport %q is not PostgreSQL", Redact(transportURL))
	}
	storeScheme, _, _ := strings.Cut(storeDSN, ":")
	switch strings.ToLower(storeScheme) {
	case "postgres", "postgresql":
		return nil
	case "sqlite":
		return refuse("the store %s is SQLite, a file the transport's database cannot see", Redact(storeDSN))
	case "mysql", "mariadb":
		return refuse("the store %s is MariaDB/MySQL", Redact(storeDSN))
	case "sqlserver":
		return refuse("the store %s is SQL Server", Redact(storeDSN))
	default:
		return refuse("the store %q is not PostgreSQL", Redact(storeDSN))
	}
}

// ExactlyOnceForwarder returns the dispatch satellite's Forwarder (timeouts.Config.Forwarder)
// that forwards each due message and removes its timeout in one transaction, for a transport
// OpenTransport opened on a postgres:// URL and a store OpenStore opened on a postgres:// DSN.
// It refuses, with a Permanent error that says why, a transport and a store that do not share
// one PostgreSQL database; an error reaching the database is worth retrying.
func ExactlyOnceForwarder(ctx context.Context, transport *Transport, store persistence.Store, logger watermill.LoggerAdapter) (public.Forwarder, error) {
	f, err := sqltransport.NewExactlyOnceForwarder(ctx, transport.Publisher, store, logger)
	if errors.Is(err, sqltransport.ErrExactlyOnceUnsupported) {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}
