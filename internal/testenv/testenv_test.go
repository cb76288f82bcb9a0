package testenv

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	pg := server{name: "PostgreSQL", env: PostgresDSNEnv, startedByMakeTest: true}
	ss := server{name: "SQL Server", env: SQLServerDSNEnv, skipMessage: "no SQL Server can run here"}

	value, fatal, msg := lookup(pg, env(map[string]string{PostgresDSNEnv: "postgres://x", "CI": "true"}))
	require.Equal(t, "postgres://x", value)
	require.False(t, fatal)
	require.Empty(t, msg)

	_, fatal, msg = lookup(pg, env(nil))
	require.False(t, fatal, "outside CI a missing server skips")
	require.Contains(t, msg, PostgresDSNEnv)
	require.Contains(t, msg, "make test")

	_, fatal, msg = lookup(pg, env(map[string]string{"CI": "true"}))
	require.True(t, fatal, "under CI a server make test starts must be there")
	require.Contains(t, msg, PostgresDSNEnv)
	require.Contains(t, msg, "was not started")

	_, fatal, msg = lookup(ss, env(map[string]string{"CI": "true"}))
	require.False(t, fatal, "SQL Server always skips: nothing can start it")
	require.Equal(t, "no SQL Server can run here", msg)
}

func TestSQLServerSkipMessage(t *testing.T) {
	t.Setenv(SQLServerDSNEnv, "")
	t.Setenv("CI", "true")
	ran := t.Run("skipped", func(t *testing.T) {
		SQLServerDSN(t)
		t.Error("not skipped")
	})
	require.True(t, ran, "a skipped subtest still counts as passed")
}

func TestUniqueName(t *testing.T) {
	t.Parallel()
	a, b := UniqueName(t, "tm"), UniqueName(t, "tm")
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "tm_testuniquename_"), a)

	t.Run(strings.Repeat(`Weird "name"; DROP TABLE x; -- `, 5), func(t *testing.T) {
		name := UniqueName(t, "tm")
		require.LessOrEqual(t, len(name), maxNameLength)
		for _, r := range name {
			require.True(t, r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_', "%q in %q", r, name)
		}
	})
	require.Equal(t, "t_123", sanitize("123"))
	require.Equal(t, "t_", sanitize("/"))
}

func TestWithSearchPath(t *testing.T) {
	t.Parallel()
	got, err := withSearchPath("postgres://u@127.0.0.1:5442/db?sslmode=disable", "s1")
	require.NoError(t, err)
	require.Equal(t, "postgres://u@127.0.0.1:5442/db?search_path=s1&sslmode=disable", got)

	got, err = withSearchPath("host=127.0.0.1 dbname=db", "s1")
	require.NoError(t, err)
	require.Equal(t, "host=127.0.0.1 dbname=db search_path=s1", got)
}

func TestPostgresSchema(t *testing.T) {
	t.Parallel()
	base := PostgresDSN(t)
	var schema string
	t.Run("own schema", func(t *testing.T) {
		dsn, s := PostgresSchema(t)
		schema = s
		db := open(t, "pgx", dsn)
		var current string
		require.NoError(t, db.QueryRowContext(t.Context(), "SELECT current_schema()").Scan(&current))
		require.Equal(t, s, current, "the DSN's connections use the schema")
		_, err := db.ExecContext(t.Context(), "CREATE TABLE t (id int)")
		require.NoError(t, err, "a table in it")
	})
	require.False(t, exists(t, "pgx", base, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema),
		"the schema is dropped when the test ends")
}

func TestMySQLDatabase(t *testing.T) {
	t.Parallel()
	base := MySQLDSN(t)
	var database string
	t.Run("own database", func(t *testing.T) {
		dsn, d := MySQLDatabase(t)
		database = d
		db := open(t, "mysql", dsn)
		var current string
		require.NoError(t, db.QueryRowContext(t.Context(), "SELECT DATABASE()").Scan(&current))
		require.Equal(t, d, current)
		_, err := db.ExecContext(t.Context(), "CREATE TABLE t (id int)")
		require.NoError(t, err, "a table in it")
	})
	require.False(t, exists(t, "mysql", base, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", database),
		"the database is dropped when the test ends")
}

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

func exists(t *testing.T, driver, dsn, query string, arg any) bool {
	t.Helper()
	db := open(t, driver, dsn)
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), query, arg).Scan(&n))
	return n > 0
}
