package sqltransport

import (
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
)

// ErrInvalidConfig is wrapped by every configuration error of this package. It is the same
// value in every package of the module: errors.Is with it matches them all.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Dialect names the database a transport runs on.
type Dialect string

// The databases this package runs on.
const (
	// PostgreSQL 13 or later, through pgx (github.com/jackc/pgx/v5/stdlib).
	PostgreSQL Dialect = "postgres"
	// MySQL is MariaDB 10.6 or later and MySQL 8, through go-sql-driver/mysql. Both need
	// FOR UPDATE SKIP LOCKED.
	MySQL Dialect = "mysql"
)

// Defaults of Config.
const (
	defaultTablePrefix    = "watermill_"
	DefaultPollInterval   = 100 * time.Millisecond
	defaultBatchSize      = 10
	defaultConsumers      = 1
	defaultAckDeadline    = 30 * time.Second
	defaultResendInterval = time.Second
	defaultRetryInterval  = time.Second
	defaultMaxOpenConns   = 10
)

// Config configures a Publisher and a Subscriber on one database.
type Config struct {
	// Dialect is PostgreSQL or MySQL (for MariaDB too). Required.
	Dialect Dialect

	// DSN is what the Publisher and the Subscriber each open a pool of their own with:
	// for PostgreSQL a pgx connection string (postgres://user:password@host:5432/db or
	// host=... dbname=...), for MySQL a go-sql-driver DSN (user:password@tcp(host:3306)/db).
	// Required unless DB is set. Its password never appears in errors.
	DSN string

	// DB, when set, is used instead of opening DSN: a pool opened with the "pgx" or the "mysql"
	// driver. Close leaves it open. Every consumer holds one of its connections while it hands
	// out a batch, so the pool must have room for Consumers connections per subscribed topic,
	// and one more per recoverability deferred queue (which holds a lock on it), besides what the
	// handlers of those messages use on it.
	DB *sql.DB

	// Schema is the PostgreSQL schema of the queue tables. Defaults to none: the tables are
	// named unqualified and found through the connection's search_path. Must be empty for MySQL
	// (the DSN's database is the schema).
	Schema string

	// TablePrefix is put before a topic's name to name its table. Defaults to "watermill_", as
	// watermill-sql names its tables. Letters, digits and underscores, at most 32 bytes. A name
	// longer than the database allows (63 bytes on PostgreSQL, 64 on MySQL) is cut and a hash of
	// the whole topic appended, so two topics never share a table.
	TablePrefix string

	// PollInterval is how long a consumer that found its queue empty waits before it looks
	// again, unless a Publisher sharing its wake-ups (New, Publisher.NewSubscriber) commits rows
	// to its topic first. Defaults to 100 ms. It bounds the time a message waits in a table before it is
	// handed out, once per hop: a due timeout crosses two (the dispatcher queue, then its
	// destination), so delayed delivery is late by about one PollInterval on average and two at
	// worst when the rows come from another process. An idle look is one short statement per
	// topic and interval, whichever of the topic's sleeping consumers makes it: at 100 ms an idle
	// endpoint (two queues) asks its database about 20 times a second, however many Consumers.
	PollInterval time.Duration

	// BatchSize is how many messages one consumer locks and hands out per transaction; acked
	// messages are deleted when the batch ends. Defaults to 10, at most 1000. Larger batches
	// spend fewer commits per message; smaller ones share a backlog more evenly between
	// competing consumers and keep a message that is slow to handle from holding up fewer
	// others. With Consumers above 1 a consumer hands its whole batch out at once, so BatchSize
	// also bounds how many messages each consumer has in handlers at the same time.
	BatchSize int

	// Consumers is how many consumers each Subscribe starts on its topic. Each takes rows no
	// other consumer holds (FOR UPDATE SKIP LOCKED). Defaults to 1: one message at a time, in
	// table order. With n above 1 each consumer hands out its whole batch without waiting for
	// acks, so a router handles up to n × BatchSize messages of the topic at once, in no
	// particular order, and a batch costs one commit however long each message takes.
	Consumers int

	// AckDeadline is how long a handler may take to ack a message: after it the message's
	// context is cancelled, and the message is handed out again. Defaults to 30 s.
	AckDeadline time.Duration

	// ResendInterval is how long a consumer waits before it hands a nacked message out again.
	// Defaults to 1 s. With Consumers above 1 the message then goes back to its table for a
	// later batch, and the rest of its batch is committed without waiting for it.
	ResendInterval time.Duration

	// RetryInterval is how long a consumer waits after its query failed (the database is down)
	// before it tries again. Defaults to 1 s.
	RetryInterval time.Duration

	// MaxOpenConns bounds the Publisher's pool when it is opened from DSN, and NewPublisher (or
	// New) opens them all before it returns, so that the first burst of messages does not wait
	// while the server starts connections; those the server refuses then are opened when needed.
	// Defaults to 10. The
	// Subscriber's pool is not bounded: it holds one connection for each consumer of each
	// subscribed topic while that consumer looks or hands out a batch, and one for each
	// recoverability deferred queue it consumes (holding the lock that keeps the queue to one
	// consumer), and no more.
	MaxOpenConns int

	// SkipSchemaInitialization leaves the queue tables to the operator. Defaults to false: a
	// topic's table is created, if missing, before the first Publish or Subscribe to it.
	SkipSchemaInitialization bool
}

// tablePrefixPattern keeps prefixes plain: they are pasted before validated topics.
var tablePrefixPattern = regexp.MustCompile(`^[A-Za-z0-9_]*$`)

// maxTablePrefix leaves room in a table name for a topic or its hash.
const maxTablePrefix = 32

func (c *Config) setDefaults() {
	if c.TablePrefix == "" {
		c.TablePrefix = defaultTablePrefix
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = defaultBatchSize
	}
	if c.Consumers == 0 {
		c.Consumers = defaultConsumers
	}
	if c.AckDeadline == 0 {
		c.AckDeadline = defaultAckDeadline
	}
	if c.ResendInterval == 0 {
		c.ResendInterval = defaultResendInterval
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = defaultRetryInterval
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = defaultMaxOpenConns
	}
}

// Validate reports the first missing or impossible setting. Its errors never show the DSN's
// password.
func (c Config) Validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch c.Dialect {
	case PostgreSQL, MySQL:
	case "":
		return invalid("Dialect is required (sqltransport.PostgreSQL or sqltransport.MySQL)")
	default:
		return invalid("unknown Dialect %q (sqltransport.PostgreSQL or sqltransport.MySQL)", c.Dialect)
	}
	switch {
	case c.DB == nil && c.DSN == "":
		return invalid("DSN or DB is required")
	case c.DB != nil && c.DSN != "":
		return invalid("set DSN or DB, not both")
	}
	if c.DSN != "" && c.Dialect == MySQL {
		if _, err := gomysql.ParseDSN(c.DSN); err != nil {
			return invalid("DSN %s is not a go-sql-driver/mysql DSN (user:password@tcp(host:3306)/db): %w",
				redact(c.DSN), redactError(err, c.DSN))
		}
	}
	if c.Schema != "" {
		if c.Dialect == MySQL {
			return invalid("Schema is for PostgreSQL; on MySQL the DSN's database holds the tables")
		}
		if len(c.Schema) > maxNameLength(PostgreSQL) || !utf8.ValidString(c.Schema) || strings.ContainsRune(c.Schema, 0) {
			return invalid("Schema %q must be valid UTF-8 without NUL, at most %d bytes", c.Schema, maxNameLength(PostgreSQL))
		}
	}
	if !tablePrefixPattern.MatchString(c.TablePrefix) || len(c.TablePrefix) > maxTablePrefix {
		return invalid("TablePrefix %q must be letters, digits and underscores, at most %d bytes", c.TablePrefix, maxTablePrefix)
	}
	switch {
	case c.PollInterval < 0:
		return invalid("PollInterval must be positive, got %s", c.PollInterval)
	case c.BatchSize < 0:
		return invalid("BatchSize must be positive, got %d", c.BatchSize)
	case c.BatchSize > maxBatchSize:
		return invalid("BatchSize must be at most %d, got %d", maxBatchSize, c.BatchSize)
	case c.Consumers < 0:
		return invalid("Consumers must be positive, got %d", c.Consumers)
	case c.Consumers > maxConsumers:
		return invalid("Consumers must be at most %d, got %d", maxConsumers, c.Consumers)
	case c.AckDeadline < 0:
		return invalid("AckDeadline must be positive, got %s", c.AckDeadline)
	case c.ResendInterval < 0:
		return invalid("ResendInterval must be positive, got %s", c.ResendInterval)
	case c.RetryInterval < 0:
		return invalid("RetryInterval must be positive, got %s", c.RetryInterval)
	case c.MaxOpenConns < 0:
		return invalid("MaxOpenConns must be positive, got %d", c.MaxOpenConns)
	}
	return nil
}

// Bounds of Config: a consumer holds a connection, and a batch is deleted with one statement.
const (
	maxConsumers = 64
	maxBatchSize = 1000
)

// driverName is the database/sql driver of the dialect.
func (c Config) driverName() string {
	if c.Dialect == MySQL {
		return "mysql"
	}
	return "pgx"
}

// redact returns dsn with its password replaced by "xxxxx", for errors and logs: a URL's, a
// go-sql-driver DSN's (user:password@tcp(...)) or a keyword/value DSN's (password=...).
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	if cfg, err := gomysql.ParseDSN(dsn); err == nil {
		if cfg.Passwd != "" {
			cfg.Passwd = "xxxxx"
			return cfg.FormatDSN()
		}
		return dsn
	}
	if loc := keywordPassword.FindStringSubmatchIndex(dsn); loc != nil {
		return dsn[:loc[2]] + "xxxxx" + dsn[loc[3]:]
	}
	return dsn
}

// keywordPassword finds password=... in a keyword/value DSN, quoted or not.
var keywordPassword = regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// passwordOf finds the password in a URL, a go-sql-driver DSN or a keyword/value DSN.
func passwordOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		p, _ := u.User.Password()
		return p
	}
	if cfg, err := gomysql.ParseDSN(dsn); err == nil {
		return cfg.Passwd
	}
	if m := keywordPassword.FindStringSubmatch(dsn); m != nil {
		return strings.Trim(m[1], "'")
	}
	return ""
}

// redactError hides dsn's password in err's text and keeps err for errors.Is and errors.As.
func redactError(err error, dsn string) error {
	if err == nil {
		return nil
	}
	p := passwordOf(dsn)
	if p == "" || !strings.Contains(err.Error(), p) {
		return err
	}
	return &redactedError{err: err, secret: p}
}

type redactedError struct {
	err    error
	secret string
}

func (e *redactedError) Error() string { return strings.ReplaceAll(e.err.Error(), e.secret, "xxxxx") }
func (e *redactedError) Unwrap() error { return e.err }
