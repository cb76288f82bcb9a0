// Package testenv finds the real servers that tests run against, and gives each test a database
// of its own on them.
//
// `make test` starts RabbitMQ, PostgreSQL, MariaDB, Redis and NATS (with JetStream) with
// scripts/services.sh and exports where they are:
//
//	TIMEOUTMILL_TEST_AMQP_URL       amqp://guest:guest@127.0.0.1:5682/
//	TIMEOUTMILL_TEST_POSTGRES_DSN   postgres://postgres@127.0.0.1:5442/timeoutmill?sslmode=disable
//	TIMEOUTMILL_TEST_MYSQL_DSN      timeoutmill:timeoutmill@tcp(127.0.0.1:3316)/timeoutmill?parseTime=true
//	TIMEOUTMILL_TEST_REDIS_URL      redis://127.0.0.1:6389/0
//	TIMEOUTMILL_TEST_NATS_URL       nats://127.0.0.1:4232
//	TIMEOUTMILL_TEST_SQLSERVER_DSN  only when a user points the tests at a SQL Server
//
// A test asks for a server with PostgresDSN, MySQLDSN, AMQPURL, RedisURL, NATSURL or SQLServerDSN. When the variable
// is unset the test is skipped with a message saying how to run it, except under CI (the CI
// variable is set) for the servers `make test` starts: there a missing server is a broken build,
// and the test fails rather than hide it behind a skip.
//
//	func TestStore(t *testing.T) {
//		dsn, schema := testenv.PostgresSchema(t) // a fresh schema, dropped when t ends
//		...
//	}
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// The environment variables that say where the test servers are.
const (
	PostgresDSNEnv  = "TIMEOUTMILL_TEST_POSTGRES_DSN"
	MySQLDSNEnv     = "TIMEOUTMILL_TEST_MYSQL_DSN"
	AMQPURLEnv      = "TIMEOUTMILL_TEST_AMQP_URL"
	RedisURLEnv     = "TIMEOUTMILL_TEST_REDIS_URL"
	NATSURLEnv      = "TIMEOUTMILL_TEST_NATS_URL"
	SQLServerDSNEnv = "TIMEOUTMILL_TEST_SQLSERVER_DSN"
)

// server describes one kind of server a test may need.
type server struct {
	name string
	env  string
	// startedByMakeTest: scripts/services.sh starts it, so under CI it must be there.
	startedByMakeTest bool
	// skipMessage replaces the usual skip message (SQL Server, which nothing here can run).
	skipMessage string
}

// PostgresDSN returns the DSN of the test PostgreSQL server, or skips t (fails it under CI).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return lookupOrStop(t, server{name: "PostgreSQL", env: PostgresDSNEnv, startedByMakeTest: true})
}

// MySQLDSN returns the go-sql-driver DSN of the test MariaDB server, or skips t (fails it under CI).
func MySQLDSN(t testing.TB) string {
	t.Helper()
	return lookupOrStop(t, server{name: "MariaDB/MySQL", env: MySQLDSNEnv, startedByMakeTest: true})
}

// AMQPURL returns the URL of the test RabbitMQ server, or skips t (fails it under CI).
func AMQPURL(t testing.TB) string {
	t.Helper()
	return lookupOrStop(t, server{name: "RabbitMQ", env: AMQPURLEnv, startedByMakeTest: true})
}

// RedisURL returns the URL of the test Redis server, or skips t (fails it under CI).
func RedisURL(t testing.TB) string {
	t.Helper()
	return lookupOrStop(t, server{name: "Redis", env: RedisURLEnv, startedByMakeTest: true})
}

// NATSURL returns the URL of the test NATS server (JetStream enabled), or skips t (fails it under CI).
func NATSURL(t testing.TB) string {
	t.Helper()
	return lookupOrStop(t, server{name: "NATS", env: NATSURLEnv, startedByMakeTest: true})
}

// SQLServerDSN returns the DSN of a SQL Server the user pointed the tests at, or skips t: no SQL
// Server can run on these machines, so CI never has one.
func SQLServerDSN(t testing.TB) string {
	t.Helper()
	return lookupOrStop(t, server{
		name:        "SQL Server",
		env:         SQLServerDSNEnv,
		skipMessage: "no SQL Server can run here; set " + SQLServerDSNEnv + " to run",
	})
}

func lookupOrStop(t testing.TB, s server) string {
	t.Helper()
	value, fatal, msg := lookup(s, os.Getenv)
	switch {
	case value != "":
		return value
	case fatal:
		t.Fatal(msg)
	default:
		t.Skip(msg)
	}
	return ""
}

// lookup finds s's variable with getenv. When it is unset, msg says why, and fatal says whether
// that fails the test rather than skips it.
func lookup(s server, getenv func(string) string) (value string, fatal bool, msg string) {
	if value = getenv(s.env); value != "" {
		return value, false, ""
	}
	if s.startedByMakeTest && getenv("CI") != "" {
		return "", true, fmt.Sprintf("%s is not set although CI is: %s was not started "+
			"(`make test` starts it with scripts/services.sh up and sources the env file it writes)", s.env, s.name)
	}
	if s.skipMessage != "" {
		return "", false, s.skipMessage
	}
	return "", false, fmt.Sprintf("%s is not set, so no %s to test against; `make test` starts the servers "+
		"(or run scripts/services.sh up and source the env file it prints)", s.env, s.name)
}
