package postgres_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) persistence.Store {
		dsn, schema := testenv.PostgresSchema(t)
		return open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	})
}

// TestStoreOnCallersDB runs the suite on stores made by New on one *sql.DB the caller owns,
// which Close must leave open.
func TestStoreOnCallersDB(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	sqlstoretest.RunOnCallersDB(t, db, true, func(t *testing.T) (*postgres.Store, error) {
		return postgres.New(db, postgres.Config{Schema: schema, Table: testenv.UniqueName(t, "timeouts")})
	})
}

// open opens a store and sets up its table; the conformance suite closes it.
func open(t testing.TB, config postgres.Config) *postgres.Store {
	return sqlstoretest.Open(t, func(ctx context.Context) (*postgres.Store, error) { return postgres.Open(ctx, config) })
}

func openDB(t testing.TB, dsn string) *sql.DB { return sqlstoretest.DB(t, "pgx", dsn) }

// TestHostileNames shows that endpoint and schema names are quoted, never pasted: a name made to
// break out of SQL becomes a table with exactly that name, and nothing else happens.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `CREATE TABLE victims (id int)`)
	require.NoError(t, err)

	for _, tc := range []struct{ name, endpoint, schema string }{
		{"endpoint", `it's "orders"; DROP TABLE victims; --`, schema},
		{"backslash and dollar quotes", `a\b$$c$$;'`, schema},
		{"schema", "orders", schema + `"; DROP TABLE victims; --`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := open(t, postgres.Config{DSN: dsn, Schema: tc.schema, Endpoint: tc.endpoint})
			t.Cleanup(func() { require.NoError(t, store.Close()) })
			if tc.schema != schema {
				t.Cleanup(func() {
					_, err := db.ExecContext(context.Background(), `DROP SCHEMA `+quote(tc.schema)+` CASCADE`)
					require.NoError(t, err)
				})
			}

			var n int
			require.NoError(t, db.QueryRowContext(ctx,
				`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`,
				tc.schema, tc.endpoint+".timeouts").Scan(&n))
			require.Equal(t, 1, n, "a table named exactly %q", tc.endpoint+".timeouts")

			sqlstoretest.StoresAndClaims(t, store)
		})
	}
	_, err = db.ExecContext(ctx, `SELECT * FROM victims`)
	require.NoError(t, err, "the victims table is still there")
}

func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := []postgres.Config{
		{Endpoint: "orders"},
		{Table: "t"},
		{Endpoint: strings.Repeat("e", 63-len(".timeouts"))},
		{Endpoint: `it's "fine"; DROP TABLE x; --`},
		{Table: "t", Schema: "s", MaxOpenConns: 3},
	}
	for _, c := range valid {
		require.NoError(t, c.Validate(), "%+v", c)
	}
	refused := map[string]postgres.Config{
		"Endpoint or Table must be set":   {},
		"longer than 63 bytes":            {Endpoint: strings.Repeat("e", 63-len(".timeouts")+1)},
		"NUL byte":                        {Table: "a\x00b"},
		"not valid UTF-8":                 {Table: "a\xffb"},
		"Schema":                          {Table: "t", Schema: strings.Repeat("s", 64)},
		"MaxOpenConns cannot be negative": {Table: "t", MaxOpenConns: -1},
	}
	for want, c := range refused {
		err := c.Validate()
		require.ErrorContains(t, err, want, "%+v", c)
		require.ErrorContains(t, err, "postgres: invalid config")
		_, err = postgres.New(&sql.DB{}, c)
		require.ErrorContains(t, err, want, "New refuses it too")
	}
	_, err := postgres.Open(t.Context(), postgres.Config{Endpoint: "orders"})
	require.ErrorContains(t, err, "DSN must be set")
	_, err = postgres.New(nil, postgres.Config{Endpoint: "orders"})
	require.ErrorContains(t, err, "db is nil")
}

// TestLongTableNames: index names are made from the table name; at PostgreSQL's 63-byte limit
// they are shortened with a hash, so that two long tables in one schema never share an index.
func TestLongTableNames(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	ctx := t.Context()
	prefix := strings.Repeat("é", 25) // 50 bytes, so that cutting lands inside a character
	for _, suffix := range []string{"-one", "-two", strings.Repeat("x", 13)} {
		store := open(t, postgres.Config{DSN: dsn, Schema: schema, Table: prefix + suffix})
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		inserted, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
		require.NoError(t, err)
		require.True(t, inserted, "each table is its own")
	}
	db := openDB(t, dsn)
	var indexes int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1`, schema).Scan(&indexes))
	require.Equal(t, 30, indexes, "three tables, eight indexes each (primary key, available_at, owner, dedup_key, due_id, parked, claimed, claimed_by), "+
		"and two on each table of owners (its key, its counts)")
	var counts int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE '%\_counts'`,
		schema).Scan(&counts))
	require.Equal(t, 3, counts, "each table its own counts")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE '%\_owners'`,
		schema).Scan(&counts))
	require.Equal(t, 3, counts, "each table its own owners")
	for _, suffix := range []string{"-one", "-two", strings.Repeat("x", 13)} {
		store := open(t, postgres.Config{DSN: dsn, Schema: schema, Table: prefix + suffix})
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		st, err := store.Stats(ctx, time.Now())
		require.NoError(t, err)
		require.Equal(t, 1, st.Pending, "each table counts its own")
	}
}

func TestSetupInfrastructure(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	ctx := t.Context()

	t.Run("concurrent and repeated", func(t *testing.T) {
		config := postgres.Config{DSN: dsn, Schema: schema + "_new", Endpoint: "orders"}
		db := openDB(t, dsn)
		t.Cleanup(func() {
			_, err := db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+quote(config.Schema)+` CASCADE`)
			require.NoError(t, err)
		})
		sqlstoretest.SetupAtOnce(t, func(ctx context.Context) (*postgres.Store, error) { return postgres.Open(ctx, config) },
			"instances setting up at once, in a schema that did not exist")
	})

	t.Run("without the right to create", func(t *testing.T) {
		owner := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "locked"})
		t.Cleanup(func() { require.NoError(t, owner.Close()) })

		limited := roleDSN(t, dsn, schema, "locked.timeouts", "")
		store, err := postgres.Open(ctx, postgres.Config{DSN: limited, Schema: schema, Endpoint: "locked"})
		require.NoError(t, err)
		defer store.Close()
		require.NoError(t, store.SetupInfrastructure(ctx), "everything exists: nothing to create")
		inserted, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
		require.NoError(t, err)
		require.True(t, inserted)
		st, err := store.Stats(ctx, time.Now())
		require.NoError(t, err, "the counts of a table it may read")
		require.Equal(t, 1, st.Pending)
		require.Equal(t, map[string]int{"d": 1}, st.ByDestination)
		removed, err := store.Cancel(ctx, "a")
		require.NoError(t, err)
		require.True(t, removed)
		st, err = store.Stats(ctx, time.Now())
		require.NoError(t, err)
		require.Zero(t, st.Pending, "its changes are counted")

		other, err := postgres.Open(ctx, postgres.Config{DSN: limited, Schema: schema, Endpoint: "missing"})
		require.NoError(t, err)
		defer other.Close()
		require.ErrorContains(t, other.SetupInfrastructure(ctx), "permission denied",
			"a missing table needs the right to create it")
	})
}

// roleDSN creates a login role, with options (CREATE ROLE's, after LOGIN), that may use table's
// rows in schema and nothing else, and returns dsn with the role as its user. The role is dropped
// when the test ends.
func roleDSN(t *testing.T, dsn, schema, table, options string) string {
	t.Helper()
	role := testenv.UniqueName(t, "tm_role")
	db := openDB(t, dsn)
	for _, stmt := range []string{
		`CREATE ROLE ` + role + ` LOGIN ` + options,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + schema + `.` + quote(table) + ` TO ` + role,
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			_, err := db.ExecContext(context.Background(), stmt)
			require.NoError(t, err, stmt)
		}
	})
	return strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
}

func TestTextColumns(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	ctx := t.Context()
	for _, to := range []persistence.Timeout{
		{ID: "bad\xff", Destination: "d", Due: time.Now()},
		{ID: "nul\x00", Destination: "d", Due: time.Now()},
		{ID: "a", Destination: "bad\xff", Due: time.Now()},
		{ID: "a", Destination: "d", Owner: "nul\x00", Due: time.Now()},
	} {
		inserted, err := store.Store(ctx, to)
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout, "%+q", to)
		require.False(t, inserted)
	}
	// Ids compare byte for byte, whatever the database's collation.
	for _, id := range []string{"a", "A", "a "} {
		inserted, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "d", Due: time.Now()})
		require.NoError(t, err)
		require.True(t, inserted, "%q is an id of its own", id)
	}
}

// TestDueRoundsUp: a due time finer than a microsecond is kept rounded up, so the timeout is
// never claimed before it is due.
func TestDueRoundsUp(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"})
	sqlstoretest.DueRoundsUp(t, store)
}

// TestClaimLeavesSessionSettings shows that a claim's synchronous_commit = off is its own
// transaction's: the connection's next statement, a Store, commits as the session says, and the
// claim still claims each due timeout once, earliest due first.
func TestClaimLeavesSessionSettings(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	db := openDB(t, dsn)
	db.SetMaxOpenConns(1) // every statement on the same session
	ctx := t.Context()
	store, err := postgres.New(db, postgres.Config{Schema: schema, Endpoint: "orders"})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(ctx))
	_, err = db.ExecContext(ctx, `SET synchronous_commit = local`) // the session's own choice
	require.NoError(t, err)

	now := time.Now().UTC()
	for i, id := range []string{"c", "a", "b"} {
		_, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "dest", Due: now.Add(-time.Duration(3-i) * time.Second)})
		require.NoError(t, err)
	}
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"c", "a", "b"}, ids)

	var setting string
	require.NoError(t, db.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&setting))
	require.Equal(t, "local", setting, "the session's setting after a claim")

	again, err := store.ClaimDue(ctx, now.Add(30*time.Second), 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, again, "claimed ids stay leased")
	again, err = store.ClaimDue(ctx, now.Add(61*time.Second), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"c", "a", "b"}, again, "and are claimed again once their lease ran out")
}

// TestUnopened: every call on a Store that Open or New did not make fails, saying so.
func TestUnopened(t *testing.T) {
	t.Parallel()
	sqlstoretest.Unopened(t, "postgres", &postgres.Store{}) // a nil *Store is refused by timeouts.NewManager
}

// TestUnopenedTx: the calls of the exactly-once forwarder fail alike, and DB has no pool to give.
func TestUnopenedTx(t *testing.T) {
	t.Parallel()
	for _, store := range []*postgres.Store{{}, nil} {
		require.Nil(t, store.DB())
		_, err := store.RemoveTx(t.Context(), &sql.Tx{}, "a")
		require.ErrorContains(t, err, "postgres: the store was not opened with Open or New")
		_, err = store.RemoveManyWith(t.Context(), &sql.DB{}, []string{"a"}, nil)
		require.ErrorContains(t, err, "postgres: the store was not opened with Open or New")
	}
}

// TestHoldsAcrossPools: an instance name held through one pool cannot be taken through another,
// as by another process, until it is released or the holding pool closed.
func TestHoldsAcrossPools(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	config := postgres.Config{DSN: dsn, Schema: schema, Endpoint: "orders"}
	sqlstoretest.HoldsAcrossPools(t, func(ctx context.Context) (*postgres.Store, error) { return postgres.Open(ctx, config) })
}
