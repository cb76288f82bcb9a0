package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	// America/Los_Angeles, wherever the tests run.
	_ "time/tzdata"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) persistence.Store {
		dsn, _ := testenv.MySQLDatabase(t)
		return open(t, mysql.Config{DSN: dsn, Endpoint: "orders"})
	})
}

// TestStoreOnCallersDB runs the suite on stores made by New on one *sql.DB the caller owns, whose
// DSN reads times in another zone and reports found rather than changed rows: neither may change
// what the store does. Close must leave the *sql.DB open.
func TestStoreOnCallersDB(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	cfg, err := gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.ParseTime = true
	cfg.Loc, err = time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	cfg.ClientFoundRows = true
	cfg.Params = map[string]string{"time_zone": "'+05:00'"}
	db := openDB(t, cfg.FormatDSN())
	sqlstoretest.RunOnCallersDB(t, db, true, func(t *testing.T) (*mysql.Store, error) {
		return mysql.New(db, mysql.Config{Table: testenv.UniqueName(t, "timeouts")})
	})
}

// open opens a store and sets up its table; the conformance suite closes it.
func open(t testing.TB, config mysql.Config) *mysql.Store {
	return sqlstoretest.Open(t, func(ctx context.Context) (*mysql.Store, error) { return mysql.Open(ctx, config) })
}

func openDB(t testing.TB, dsn string) *sql.DB { return sqlstoretest.DB(t, "mysql", dsn) }

// TestHostileNames shows that endpoint names are quoted, never pasted: a name made to break out
// of SQL becomes a table with exactly that name, and nothing else happens.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	dsn, database := testenv.MySQLDatabase(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	_, err := db.ExecContext(ctx, "CREATE TABLE victims (id int)")
	require.NoError(t, err)

	for _, endpoint := range []string{
		"it's `orders`; DROP TABLE victims; --",
		`a\b"c";'`,
		"path/../with.dots and spaces",
		"ünïcødé-日本",
	} {
		t.Run(endpoint, func(t *testing.T) {
			store := open(t, mysql.Config{DSN: dsn, Endpoint: endpoint})
			t.Cleanup(func() { require.NoError(t, store.Close()) })

			var n int
			require.NoError(t, db.QueryRowContext(ctx,
				"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND BINARY table_name = BINARY ?",
				database, endpoint+".timeouts").Scan(&n))
			require.Equal(t, 1, n, "a table named exactly %q", endpoint+".timeouts")

			sqlstoretest.StoresAndClaims(t, store)
		})
	}
	_, err = db.ExecContext(ctx, "SELECT * FROM victims")
	require.NoError(t, err, "the victims table is still there")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := []mysql.Config{
		{Endpoint: "orders"},
		{Table: "t"},
		{Endpoint: strings.Repeat("é", 64-len(".timeouts"))},
		{Endpoint: "it's `fine`; DROP TABLE x; --"},
		{Table: "t", MaxOpenConns: 3},
	}
	for _, c := range valid {
		require.NoError(t, c.Validate(), "%+v", c)
	}
	refused := map[string]mysql.Config{
		"Endpoint or Table must be set":   {},
		"longer than 64 characters":       {Endpoint: strings.Repeat("e", 64-len(".timeouts")+1)},
		"NUL":                             {Table: "a\x00b"},
		"not valid UTF-8":                 {Table: "a\xffb"},
		"ends with a space":               {Table: "t "},
		"Basic Multilingual Plane":        {Endpoint: "rocket-🚀"},
		"MaxOpenConns cannot be negative": {Table: "t", MaxOpenConns: -1},
	}
	for want, c := range refused {
		err := c.Validate()
		require.ErrorContains(t, err, want, "%+v", c)
		require.ErrorContains(t, err, "mysql: invalid config")
		_, err = mysql.New(&sql.DB{}, c)
		require.ErrorContains(t, err, want, "New refuses it too")
	}
	ctx := t.Context()
	_, err := mysql.Open(ctx, mysql.Config{Endpoint: "orders"})
	require.ErrorContains(t, err, "DSN must be set")
	_, err = mysql.Open(ctx, mysql.Config{Endpoint: "orders", DSN: "u:p@tcp(127.0.0.1:1)/"})
	require.ErrorContains(t, err, "DSN must name a database")
	_, err = mysql.Open(ctx, mysql.Config{Endpoint: "orders", DSN: "not a dsn"})
	require.ErrorContains(t, err, "DSN")
	_, err = mysql.New(nil, mysql.Config{Endpoint: "orders"})
	require.ErrorContains(t, err, "db is nil")
}

// TestLongestNames: 64 characters work when MariaDB's file name for the table fits in 255
// bytes; a name whose file name does not is refused by SetupInfrastructure, clearly.
func TestLongestNames(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	// 'é' and '日' take 3 and 5 bytes in MariaDB's file names, '/' 5.
	for _, table := range []string{strings.Repeat("t", 64), strings.Repeat("é", 64), strings.Repeat("日", 50), strings.Repeat("/", 50)} {
		store := open(t, mysql.Config{DSN: dsn, Table: table})
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		inserted, err := store.Store(t.Context(), persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
		require.NoError(t, err, "table %q", table)
		require.True(t, inserted)
	}
	store, err := mysql.Open(t.Context(), mysql.Config{DSN: dsn, Table: strings.Repeat("/", 64)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	require.ErrorContains(t, store.SetupInfrastructure(t.Context()), "File name too long")
}

func TestSetupInfrastructure(t *testing.T) {
	t.Parallel()
	dsn, database := testenv.MySQLDatabase(t)
	ctx := t.Context()

	t.Run("concurrent and repeated", func(t *testing.T) {
		config := mysql.Config{DSN: dsn, Endpoint: "orders"}
		sqlstoretest.SetupAtOnce(t, func(ctx context.Context) (*mysql.Store, error) { return mysql.Open(ctx, config) },
			"instances setting up at once")
	})

	t.Run("without the right to create", func(t *testing.T) {
		owner := open(t, mysql.Config{DSN: dsn, Endpoint: "locked"})
		t.Cleanup(func() { require.NoError(t, owner.Close()) })

		unique := testenv.UniqueName(t, "u")
		user := "tm_" + unique[len(unique)-12:] // MySQL's user names have at most 32 characters
		db := openDB(t, dsn)
		for _, stmt := range []string{
			"CREATE USER '" + user + "'@'127.0.0.1' IDENTIFIED BY 'pw'",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON " + database + ".`locked.timeouts` TO '" + user + "'@'127.0.0.1'",
		} {
			_, err := db.ExecContext(ctx, stmt)
			require.NoError(t, err, stmt)
		}
		t.Cleanup(func() {
			_, err := db.ExecContext(context.Background(), "DROP USER '"+user+"'@'127.0.0.1'")
			require.NoError(t, err)
		})

		cfg, err := gomysql.ParseDSN(dsn)
		require.NoError(t, err)
		cfg.User, cfg.Passwd = user, "pw"
		limited := cfg.FormatDSN()
		store, err := mysql.Open(ctx, mysql.Config{DSN: limited, Endpoint: "locked"})
		require.NoError(t, err)
		defer store.Close()
		require.NoError(t, store.SetupInfrastructure(ctx), "the table exists: nothing to create")
		inserted, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
		require.NoError(t, err)
		require.True(t, inserted)

		other, err := mysql.Open(ctx, mysql.Config{DSN: limited, Endpoint: "missing"})
		require.NoError(t, err)
		defer other.Close()
		require.Error(t, other.SetupInfrastructure(ctx), "a missing table needs the right to create it")
	})
}

// TestBinaryColumns: ids and owners compare byte for byte, and hold any bytes.
func TestBinaryColumns(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	store := open(t, mysql.Config{DSN: dsn, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, id := range []string{"a", "A", "a ", "ä", "bad\xff", "nul\x00"} {
		inserted, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "d\xff", Owner: "o\x00" + id, Due: now})
		require.NoError(t, err)
		require.True(t, inserted, "%q is an id of its own", id)
		got, err := store.Peek(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "d\xff", got.Destination)
		require.Equal(t, "o\x00"+id, got.Owner)
	}
	n, err := store.CancelByOwner(ctx, "o\x00a")
	require.NoError(t, err)
	require.Equal(t, 1, n, "owners compare byte for byte too")
}

func TestInvalidForColumns(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	store := open(t, mysql.Config{DSN: dsn, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	for name, to := range map[string]persistence.Timeout{
		"year 999":           {ID: "a", Destination: "d", Due: time.Date(999, 12, 31, 0, 0, 0, 0, time.UTC)},
		"year 10000":         {ID: "a", Destination: "d", Due: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"rounds to 10000":    {ID: "a", Destination: "d", Due: time.Date(9999, 12, 31, 23, 59, 59, 999999001, time.UTC)},
		"long destination":   {ID: "a", Destination: strings.Repeat("d", 1<<16), Due: time.Now()},
		"long owner":         {ID: "a", Destination: "d", Owner: strings.Repeat("o", 1<<16), Due: time.Now()},
		"persistence checks": {ID: "", Destination: "d", Due: time.Now()},
	} {
		inserted, err := store.Store(ctx, to)
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout, name)
		require.False(t, inserted, name)
	}
}

// TestDueRoundsUp: a due time finer than a microsecond is kept rounded up, so the timeout is
// never claimed before it is due.
func TestDueRoundsUp(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	store := open(t, mysql.Config{DSN: dsn, Endpoint: "orders"})
	sqlstoretest.DueRoundsUp(t, store)
}

// TestUnopened: every call on a Store that Open or New did not make fails, saying so.
func TestUnopened(t *testing.T) {
	t.Parallel()
	sqlstoretest.Unopened(t, "mysql", &mysql.Store{}) // a nil *Store is refused by timeouts.NewManager
}

// TestHoldsAcrossPools: an instance name held through one pool cannot be taken through another,
// as by another process, until it is released or the holding pool closed.
func TestHoldsAcrossPools(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	config := mysql.Config{DSN: dsn, Endpoint: "orders"}
	sqlstoretest.HoldsAcrossPools(t, func(ctx context.Context) (*mysql.Store, error) { return mysql.Open(ctx, config) })
}
