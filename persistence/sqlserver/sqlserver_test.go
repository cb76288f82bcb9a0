package sqlserver_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	// America/Los_Angeles for the DSN's timezone, wherever the tests run.
	_ "time/tzdata"

	// The "sqlserver" database/sql driver.
	_ "github.com/microsoft/go-mssqldb"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

// These tests need a SQL Server: set TIMEOUTMILL_TEST_SQLSERVER_DSN (a sqlserver:// URL whose
// login may create and drop tables and schemas in its database) to run them. Nothing here can run
// one, so without it they report themselves skipped; the SQL is checked without a server by the
// package's own tests (queries_test.go, store_internal_test.go).

// TestStore runs the conformance suite, each subtest on a table of its own.
func TestStore(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	storetest.Run(t, func(t *testing.T) persistence.Store {
		return open(t, sqlserver.Config{DSN: dsn, Table: table(t, dsn, "dbo")})
	})
}

// TestStoreOnCallersDB runs the suite on stores made by New on one *sql.DB the caller owns, whose
// DSN reads times in another zone, with daylight saving time: that may not change what the store
// does. Close must leave the
// *sql.DB open.
func TestStoreOnCallersDB(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	db := openDB(t, withParam(t, dsn, "timezone", "America/Los_Angeles"))
	sqlstoretest.RunOnCallersDB(t, db, false, func(t *testing.T) (*sqlserver.Store, error) {
		return sqlserver.New(db, sqlserver.Config{Table: table(t, dsn, "dbo")})
	})
}

// table names a table of t's own in schema and drops it when t ends.
func table(t testing.TB, dsn, schema string) string {
	t.Helper()
	name := testenv.UniqueName(t, "timeouts")
	t.Cleanup(func() { exec(t, dsn, "DROP TABLE IF EXISTS "+quote(schema)+"."+quote(name)) })
	return name
}

// open opens a store and sets up its table; the conformance suite closes it.
func open(t testing.TB, config sqlserver.Config) *sqlserver.Store {
	return sqlstoretest.Open(t, func(ctx context.Context) (*sqlserver.Store, error) { return sqlserver.Open(ctx, config) })
}

func openDB(t testing.TB, dsn string) *sql.DB { return sqlstoretest.DB(t, "sqlserver", dsn) }

// exec runs one statement on a connection of its own, for set-up and clean-up.
func exec(t testing.TB, dsn, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("sqlserver", dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	require.NoError(t, err, stmt)
}

func quote(name string) string { return "[" + strings.ReplaceAll(name, "]", "]]") + "]" }

// withParam adds key=value to a sqlserver:// URL.
func withParam(t testing.TB, dsn, key, value string) string {
	t.Helper()
	require.True(t, strings.HasPrefix(dsn, "sqlserver://"), "%s must be a sqlserver:// URL", testenv.SQLServerDSNEnv)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + key + "=" + value
}

// TestHostileNames shows that schema and endpoint names are quoted, never pasted: a name made to
// break out of SQL becomes a table with exactly that name, and nothing else happens.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	victims := testenv.UniqueName(t, "victims")
	exec(t, dsn, "CREATE TABLE dbo."+victims+" (id int)")
	t.Cleanup(func() { exec(t, dsn, "DROP TABLE IF EXISTS dbo."+victims) })
	suffix := testenv.UniqueName(t, "")

	for _, tc := range []struct{ name, schema, endpoint string }{
		{"endpoint", "dbo", "it's [" + suffix + `] "orders"]; DROP TABLE dbo.` + victims + "; --"},
		{"schema", suffix + "]'; DROP TABLE dbo." + victims + "; --", "orders"},
		{"unicode", "dbo", "ünïcødé-日本-🚀-" + suffix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := open(t, sqlserver.Config{DSN: dsn, Schema: tc.schema, Endpoint: tc.endpoint})
			t.Cleanup(func() {
				require.NoError(t, store.Close())
				exec(t, dsn, "DROP TABLE IF EXISTS "+quote(tc.schema)+"."+quote(tc.endpoint+".timeouts"))
				if tc.schema != "dbo" {
					exec(t, dsn, "DROP SCHEMA IF EXISTS "+quote(tc.schema))
				}
			})
			var n int
			require.NoError(t, db.QueryRowContext(ctx,
				`SELECT COUNT(*) FROM sys.tables WHERE SCHEMA_NAME(schema_id) = @p1 AND name = @p2`,
				tc.schema, tc.endpoint+".timeouts").Scan(&n))
			require.Equal(t, 1, n, "a table named exactly %q", tc.endpoint+".timeouts")

			sqlstoretest.StoresAndClaims(t, store)
		})
	}
	_, err := db.ExecContext(ctx, "SELECT * FROM dbo."+victims)
	require.NoError(t, err, "the victims table is still there")
}

func TestSetupInfrastructure(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	ctx := t.Context()
	schema := testenv.UniqueName(t, "tm")
	t.Cleanup(func() {
		exec(t, dsn, "DROP TABLE IF EXISTS "+quote(schema)+".[orders.timeouts]")
		exec(t, dsn, "DROP SCHEMA IF EXISTS "+quote(schema))
	})
	config := sqlserver.Config{DSN: dsn, Schema: schema, Endpoint: "orders"}

	sqlstoretest.SetupAtOnce(t, func(ctx context.Context) (*sqlserver.Store, error) { return sqlserver.Open(ctx, config) },
		"instances setting up at once, in a schema that did not exist")

	// The script a DBA would run is what SetupInfrastructure runs, and can be run again.
	script, err := sqlserver.SetupScript(config)
	require.NoError(t, err)
	db := openDB(t, dsn)
	for _, batch := range strings.Split(script, "GO\n") {
		_, err := db.ExecContext(ctx, batch)
		require.NoError(t, err, batch)
	}

	// The columns are what the package doc says.
	rows, err := db.QueryContext(ctx, `SELECT c.name, TYPE_NAME(c.user_type_id), c.max_length, c.scale, c.is_nullable, ISNULL(c.collation_name, '')
FROM sys.columns c WHERE c.object_id = OBJECT_ID(@p1) ORDER BY c.column_id`, quote(schema)+".[orders.timeouts]")
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var (
			name, typ, collation string
			maxLength, scale     int
			nullable             bool
		)
		require.NoError(t, rows.Scan(&name, &typ, &maxLength, &scale, &nullable, &collation))
		got = append(got, strings.Join([]string{name, typ, strconv.Itoa(maxLength), strconv.Itoa(scale), map[bool]string{true: "null", false: "not null"}[nullable], collation}, " "))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"Id nvarchar 500 0 not null Latin1_General_100_BIN2",
		"Destination nvarchar 500 0 not null " + defaultCollation(t, db),
		"State varbinary -1 0 null ",
		"Time datetime2 8 7 not null ",
		"Headers varbinary -1 0 not null ",
		"RetryCount int 4 0 not null ",
		"AvailableAt datetime2 8 7 not null ",
		"Owner nvarchar 500 0 not null Latin1_General_100_BIN2",
	}, got)
}

func defaultCollation(t testing.TB, db *sql.DB) string {
	t.Helper()
	var collation string
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT CONVERT(nvarchar(128), DATABASEPROPERTYEX(DB_NAME(), 'Collation'))`).Scan(&collation))
	return collation
}

// TestStringColumns: ids and owners compare exactly, whatever the database's collation.
func TestStringColumns(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	store := open(t, sqlserver.Config{DSN: dsn, Table: table(t, dsn, "dbo")})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, id := range []string{"a", "A", "ä", "a\x00", "🚀", "\U0001F680\u200d"} {
		inserted, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "d ", Owner: "o-" + id, Due: now})
		require.NoError(t, err)
		require.True(t, inserted, "%q is an id of its own", id)
		got, err := store.Peek(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "d ", got.Destination)
		require.Equal(t, "o-"+id, got.Owner)
	}
	n, err := store.CancelByOwner(ctx, "o-A")
	require.NoError(t, err)
	require.Equal(t, 1, n, "owners compare exactly too")
}

// TestTimezoneWithDaylightSaving: on a *sql.DB whose DSN reads times in a zone with daylight
// saving time, a due time whose UTC wall clock falls in the hour that zone skips (02:30 on the
// morning its clocks go forward) is kept and claimed exactly.
func TestTimezoneWithDaylightSaving(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	db := openDB(t, withParam(t, dsn, "timezone", "America/Los_Angeles"))
	store, err := sqlserver.New(db, sqlserver.Config{Table: table(t, dsn, "dbo")})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, store.SetupInfrastructure(ctx))
	due := time.Date(2030, 3, 10, 2, 30, 0, 0, time.UTC) // 02:30 in Los Angeles does not exist that day
	_, err = store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: due})
	require.NoError(t, err)
	got, err := store.Peek(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, due, got.Due)
	next, _, err := store.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, due, next)
	ids, err := store.ClaimDue(ctx, due.Add(-time.Microsecond), 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids)
	ids, err = store.ClaimDue(ctx, due, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
}

// TestDueRoundsUp: a due time finer than a microsecond is kept rounded up, so the timeout is
// never claimed before it is due.
func TestDueRoundsUp(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	store := open(t, sqlserver.Config{DSN: dsn, Table: table(t, dsn, "dbo")})
	sqlstoretest.DueRoundsUp(t, store)
}

// TestUnopened: every call on a Store that Open or New did not make fails, saying so.
func TestUnopened(t *testing.T) {
	t.Parallel()
	sqlstoretest.Unopened(t, "sqlserver", &sqlserver.Store{}) // a nil *Store is refused by timeouts.NewManager
}
