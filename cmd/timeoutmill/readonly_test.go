package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// cliStore is a store the commands are pointed at, on one of the backends.
type cliStore struct {
	dsn      string
	endpoint string
	// missing is what the error of a command on the missing store names: the table or the file.
	missing string
	// exists reports whether anything of the endpoint's store was created.
	exists func(t *testing.T) bool
}

func sqliteCLIStore(t *testing.T) cliStore {
	path := filepath.Join(t.TempDir(), "timeouts.db")
	return cliStore{dsn: "sqlite://" + path, endpoint: "order", missing: "database file " + path + " does not exist",
		exists: func(t *testing.T) bool {
			_, err := os.Stat(path)
			return err == nil
		}}
}

func postgresCLIStore(t *testing.T) cliStore {
	dsn := testenv.PostgresDSN(t)
	// The command's store is in the public schema: a table name of the test's own keeps it apart.
	endpoint := "cliorder-" + watermill.NewShortUUID()
	db := sqlDB(t, "pgx", dsn)
	t.Cleanup(func() {
		_, err := db.ExecContext(context.Background(), `DROP TABLE IF EXISTS public."`+endpoint+`.timeouts"`)
		require.NoError(t, err)
	})
	return cliStore{dsn: dsn, endpoint: endpoint, missing: `table "public"."` + endpoint + `.timeouts" does not exist`,
		exists: func(t *testing.T) bool {
			var exists bool
			require.NoError(t, db.QueryRowContext(t.Context(), `SELECT to_regclass($1) IS NOT NULL`,
				`public."`+endpoint+`.timeouts"`).Scan(&exists))
			return exists
		}}
}

func mysqlCLIStore(t *testing.T) cliStore {
	dsn, database := testenv.MySQLDatabase(t)
	db := sqlDB(t, "mysql", dsn)
	return cliStore{dsn: "mysql://" + dsn, endpoint: "order", missing: "table `order.timeouts` does not exist",
		exists: func(t *testing.T) bool {
			var n int
			require.NoError(t, db.QueryRowContext(t.Context(),
				`SELECT count(*) FROM information_schema.tables WHERE table_schema = ?`, database).Scan(&n))
			return n > 0
		}}
}

func sqlDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// TestReadOnlyCommandsCreateNothing: stats, list and cancel on an endpoint that was never set up
// (a typo, say) say that nothing is there, naming the endpoint and the missing table or file, exit
// 1 and change nothing, on every store the command opens. Once the store is set up, they work.
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	for name, newStore := range map[string]func(t *testing.T) cliStore{
		"sqlite": sqliteCLIStore, "postgres": postgresCLIStore, "mysql": mysqlCLIStore,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := newStore(t)
			flags := []string{"--endpoint", s.endpoint, "--store", s.dsn}
			commands := [][]string{
				{"stats"}, {"stats", "--json"}, {"list"}, {"list", "--json"}, {"list", "--owner", "o"},
				{"cancel", "some-id"}, {"cancel", "--owner", "o"},
				{"parked", "list"}, {"parked", "list", "--json"}, {"parked", "replay", "some-id"}, {"parked", "replay", "--all"},
				{"parked", "delete", "some-id"}, {"parked", "delete", "--all"},
				{"migrate", "--to", "rabbitmq-native", "--dry-run", "--transport", "amqp://guest:guest@127.0.0.1:1/"},
			}
			for _, command := range commands {
				code, stdout, stderr := timeoutmill(ctx, append(command, flags...)...)
				require.Equal(t, 1, code, "%s: %s", command, stderr)
				require.Contains(t, stderr, `nothing is there for endpoint "`+s.endpoint+`"`, command)
				require.Contains(t, stderr, s.missing, command)
				require.Contains(t, stderr, "timeoutmill setup creates the table", command)
				require.NotContains(t, stdout, "pending", command)
				require.False(t, s.exists(t), "%s created something", command)
			}

			// What `timeoutmill setup` does to the store.
			store, err := connect.OpenStore(ctx, s.dsn, s.endpoint)
			require.NoError(t, err)
			require.NoError(t, store.(persistence.Installer).SetupInfrastructure(ctx))
			_, err = store.Store(ctx, persistence.Timeout{ID: "t-1", Destination: "d", Due: time.Now().Add(time.Hour), Owner: "o"})
			require.NoError(t, err)
			require.NoError(t, store.Close())

			code, stdout, stderr := timeoutmill(ctx, append([]string{"stats"}, flags...)...)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, "pending:      1")
			code, stdout, stderr = timeoutmill(ctx, append([]string{"list", "--json"}, flags...)...)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, `"id":"t-1"`)
			code, stdout, stderr = timeoutmill(ctx, append([]string{"cancel", "t-1"}, flags...)...)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, "cancelled t-1")
		})
	}
}

// TestReadOnlyCommandsOnAnotherEndpointsFile: an SQLite file that holds another endpoint's
// table is not this endpoint's store; the file is left as it was.
func TestReadOnlyCommandsOnAnotherEndpointsFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "t.db")
	store, err := connect.OpenStore(ctx, "sqlite://"+path, "orders")
	require.NoError(t, err)
	require.NoError(t, store.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	code, stdout, stderr := timeoutmill(ctx, "stats", "--endpoint", "order", "--store", "sqlite://"+path)
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stderr, `nothing is there for endpoint "order"`)
	require.Contains(t, stderr, `sqlite: table "order.timeouts" does not exist in `+path)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// jsonTimePattern is RFC 3339 in UTC with six fractional digits.
var jsonTimePattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$`)

// TestJSONOutput: stats --json and list --json print one JSON object each, with the field names
// docs/operations.md documents (no more, no fewer), times in RFC 3339 with microseconds, and
// empty values as null, "" or [] rather than missing.
func TestJSONOutput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "t.db")
	dsn := "sqlite://" + path
	flags := []string{"--endpoint", "orders", "--store", dsn}
	store, err := connect.OpenStore(ctx, dsn, "orders")
	require.NoError(t, err)
	defer store.Close()

	decode := func(out string) map[string]any {
		t.Helper()
		require.Equal(t, 1, strings.Count(out, "\n"), "one line: %s", out)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	statsKeys := []string{"endpoint", "store", "at", "pending", "earliest_due", "latest_due", "most_overdue_seconds", "due_now", "claimed", "parked", "by_destination"}

	code, stdout, stderr := timeoutmill(ctx, append([]string{"stats", "--json"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	st := decode(stdout)
	require.ElementsMatch(t, statsKeys, keys(st))
	require.Equal(t, "orders", st["endpoint"])
	require.Equal(t, dsn, st["store"])
	require.InDelta(t, 0, st["pending"], 0)
	require.Nil(t, st["earliest_due"])
	require.Nil(t, st["latest_due"])
	require.InDelta(t, 0, st["most_overdue_seconds"], 0)
	require.Regexp(t, jsonTimePattern, st["at"])

	code, stdout, stderr = timeoutmill(ctx, append([]string{"list", "--json"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, `{"endpoint":"orders","store":"`+dsn+`","timeouts":[],"next":null}`, stdout)

	now := time.Now().UTC()
	overdue := now.Add(-90 * time.Second).Truncate(time.Second).Add(123456 * time.Microsecond)
	later := now.Add(time.Hour).Truncate(time.Second) // whole seconds still get six digits
	for _, tm := range []persistence.Timeout{
		{ID: "overdue", Destination: "billing", Due: overdue, Metadata: map[string]string{"trace": "abc", "ü": "\"q\""}},
		{ID: "later", Destination: "shipping", Due: later, Owner: "order-1"},
	} {
		_, err := store.Store(ctx, tm)
		require.NoError(t, err)
	}

	code, stdout, stderr = timeoutmill(ctx, append([]string{"stats", "--json"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	st = decode(stdout)
	require.ElementsMatch(t, statsKeys, keys(st))
	require.InDelta(t, 2, st["pending"], 0)
	require.Equal(t, overdue.Format(jsonTime), st["earliest_due"])
	require.Equal(t, later.Format(jsonTime), st["latest_due"])
	require.Regexp(t, `\.\d{6}Z$`, st["latest_due"])
	at, err := time.Parse(time.RFC3339Nano, st["at"].(string))
	require.NoError(t, err)
	require.InDelta(t, at.Sub(overdue).Seconds(), st["most_overdue_seconds"], 1e-6, "measured at the time it says")

	code, stdout, stderr = timeoutmill(ctx, append([]string{"list", "--json"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	list := decode(stdout)
	require.ElementsMatch(t, []string{"endpoint", "store", "timeouts", "next"}, keys(list))
	timeouts := list["timeouts"].([]any)
	require.Len(t, timeouts, 2)
	first, second := timeouts[0].(map[string]any), timeouts[1].(map[string]any)
	timeoutKeys := []string{"id", "due", "destination", "owner", "key", "failure_count", "metadata", "parked"}
	require.ElementsMatch(t, timeoutKeys, keys(first))
	require.ElementsMatch(t, timeoutKeys, keys(second))
	require.Equal(t, "overdue", first["id"], "earliest due first")
	require.Equal(t, overdue.Format(jsonTime), first["due"])
	require.Regexp(t, jsonTimePattern, first["due"])
	due, err := time.Parse(time.RFC3339Nano, first["due"].(string))
	require.NoError(t, err)
	require.True(t, due.Equal(overdue), "the stored microsecond, exactly: %s", due)
	require.Equal(t, "billing", first["destination"])
	require.Equal(t, "", first["owner"])
	require.InDelta(t, 0, first["failure_count"], 0)
	require.Equal(t, false, first["parked"])
	require.Equal(t, map[string]any{"trace": "abc", "ü": "\"q\""}, first["metadata"])
	require.Equal(t, "order-1", second["owner"])
	require.Equal(t, map[string]any{}, second["metadata"], "no headers: an empty object, not null")

	code, stdout, _ = timeoutmill(ctx, append([]string{"list", "--json", "--owner", "order-1"}, flags...)...)
	require.Equal(t, 0, code)
	require.Len(t, decode(stdout)["timeouts"], 1)

	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	require.NoError(t, err)
	section := string(doc)[strings.Index(string(doc), "**`--json`**"):]
	section = section[:strings.Index(section, "Time flags")]
	for _, k := range append(statsKeys, "timeouts", "next") {
		require.Contains(t, section, "`"+k+"`", "docs/operations.md documents %s", k)
	}
	for _, k := range timeoutKeys {
		require.Contains(t, section, `"`+k+`"`, "docs/operations.md documents %s", k)
	}

	code, _, stderr = timeoutmill(ctx, append([]string{"list", "--limit", "0"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--limit must be from 1 to 10000")
}
