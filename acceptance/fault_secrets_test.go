package acceptance

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/wire"
)

// TestFaultSecretsNeverShow runs the command with a PostgreSQL DSN and an AMQP URL that carry a
// password unusual enough to grep for (PostgreSQL trusts the test user, so any password works;
// RabbitMQ gets a user of the test's own with it), through a run that logs at debug level,
// delivers, rejects a message and serves metrics, and through every command and failure that
// prints a DSN: nothing it writes, and no metric, contains the password.
func TestFaultSecretsNeverShow(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	ctl := rabbitmqctl(t)
	secret := "tmPw" + randomHex(t, 8) + "Zq"
	e := newEnv(t, "secrets")
	user := "fault-" + randomHex(t, 4)
	for _, args := range [][]string{
		{"add_user", user, secret},
		{"set_permissions", "-p", "/", user, ".*", ".*", ".*"},
	} {
		out, err := ctl(args...)
		require.NoError(t, err, "rabbitmqctl %s: %s", args[0], out)
	}
	t.Cleanup(func() { _, _ = ctl("delete_user", user) })
	amqpURL := withPassword(t, e.url, user, secret)
	pgURL := withPassword(t, postgresDatabase(t, testenv.PostgresDSN(t)), "postgres", secret)
	unreachablePG := "postgres://postgres:" + secret + "@127.0.0.1:1/x?connect_timeout=2&sslmode=disable"
	badDB := strings.Replace(pgURL, "/fault_", "/missing_", 1)
	wrongVhost := strings.TrimSuffix(amqpURL, "/") + "/no-such-vhost"
	mysqlURL := "mysql://app:" + secret + "@127.0.0.1:1/db?timeout=2s"

	// The service itself, as verbose as it gets.
	metricsPort := freePort(t, 0)
	dest := e.queue("due")
	svc := startService(t, "secrets", append(runArgs(e.endpoint, pgURL, amqpURL, e.errorQueue),
		"--log-level", "debug", "--metrics-addr", "127.0.0.1:"+strconv.Itoa(metricsPort), "--close-timeout", "5s")...)
	client := newBrokerClient(t, e.url)
	got := client.consume(t, dest)
	errs := client.consume(t, e.errorQueue)
	msgs := newTimeouts(5, dest, time.Now().Add(500*time.Millisecond), time.Second)
	_, err := client.send(context.Background(), wire.TimeoutsQueue(e.endpoint), msgs)
	require.NoError(t, err)
	e.publishRaw(t, wire.TimeoutsQueue(e.endpoint), amqp.Publishing{MessageId: "bad", Headers: amqp.Table{wire.HeaderExpire: "never"}})
	require.True(t, got.waitDistinct(5, time.Minute))
	require.Eventually(t, func() bool { return errs.distinct() == 1 }, time.Minute, 50*time.Millisecond)

	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Contains(t, string(metrics), "timeoutmill_", "the metrics are there")

	svc.signal(t, sigterm)
	code, _ := svc.wait(t, time.Minute)
	require.Equal(t, 0, code)

	outputs := map[string]string{"run (debug log)": svc.output(), "metrics": string(metrics)}
	commands := map[string][]string{
		"stats":                          {"stats", "--endpoint", e.endpoint, "--store", pgURL},
		"list":                           {"list", "--endpoint", e.endpoint, "--store", pgURL},
		"setup":                          {"setup", "--endpoint", e.endpoint, "--store", pgURL, "--transport", amqpURL, "--error-queue", e.errorQueue},
		"cancel (not pending)":           {"cancel", "--endpoint", e.endpoint, "--store", pgURL, "nope"},
		"stats, database unreachable":    {"stats", "--endpoint", e.endpoint, "--store", unreachablePG},
		"stats, database missing":        {"stats", "--endpoint", e.endpoint, "--store", badDB},
		"stats, mysql unreachable":       {"stats", "--endpoint", e.endpoint, "--store", mysqlURL},
		"run, database unreachable":      {"run", "--endpoint", e.endpoint, "--store", unreachablePG, "--transport", amqpURL, "--outage-wait", "1s"},
		"run, vhost refused":             {"run", "--endpoint", e.endpoint, "--store", pgURL, "--transport", wrongVhost, "--outage-wait", "1s"},
		"run, exactly once refused":      {"run", "--endpoint", e.endpoint, "--store", pgURL, "--transport", amqpURL, "--exactly-once"},
		"run, sql transport unreachable": {"run", "--endpoint", e.endpoint, "--store", pgURL, "--transport", unreachablePG, "--outage-wait", "1s"},
		"run, bad flag beside secrets":   {"run", "--endpoint", e.endpoint, "--store", pgURL, "--transport", amqpURL, "--poll-interval", "soon"},
	}
	for name, args := range commands {
		cmd := runCommand(t, name, args...)
		code, _ := cmd.wait(t, 2*time.Minute)
		outputs[name+" (exit "+strconv.Itoa(code)+")"] = cmd.output()
	}
	var checked []string
	for name, out := range outputs {
		require.NotContains(t, out, secret, "%s shows the password:\n%s", name, out)
		require.NotContains(t, out, secret[4:20], "%s shows part of the password", name)
		require.NotContains(t, out, url.QueryEscape(secret), name)
		checked = append(checked, name)
	}
	sort.Strings(checked)
	require.Contains(t, outputs["run (debug log)"], "xxxxx", "the URLs are logged, redacted")
	faultLog(t, "password %d bytes, grepped for in %d outputs (%d bytes in all), found in none: %s",
		len(secret), len(outputs), total(outputs), strings.Join(checked, "; "))
}

// withPassword returns rawURL with user and password set.
func withPassword(t *testing.T, rawURL, user, password string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	u.User = url.UserPassword(user, password)
	return u.String()
}

func total(outputs map[string]string) int {
	n := 0
	for _, o := range outputs {
		n += len(o)
	}
	return n
}
