package mysql_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
)

// TestScheduleTx: scheduling in the caller's transaction (at the server's default isolation,
// REPEATABLE READ), on a store and transactions that share the caller's pool.
func TestScheduleTx(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	db := openDB(t, dsn)
	store, err := mysql.New(db, mysql.Config{Endpoint: "orders"})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(t.Context()))
	sqlstoretest.ScheduleTx(t, db, store)
}

// TestMigratesOldTable: a table of the shape an older version created, with a timeout in it,
// gets the key column and its index from SetupInfrastructure, also from instances at once.
func TestMigratesOldTable(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.MySQLDatabase(t)
	db := openDB(t, dsn)
	for _, stmt := range []string{
		"CREATE TABLE `orders.timeouts` (\n" +
			"\tid VARBINARY(250) NOT NULL,\n" +
			"\tdestination BLOB NOT NULL,\n" +
			"\tdue DATETIME(6) NOT NULL,\n" +
			"\tavailable_at DATETIME(6) NOT NULL,\n" +
			"\towner BLOB NOT NULL,\n" +
			"\tpayload LONGBLOB NOT NULL,\n" +
			"\tmetadata MEDIUMBLOB NOT NULL,\n" +
			"\tfailure_count INT NOT NULL DEFAULT 0,\n" +
			"\tPRIMARY KEY (id),\n" +
			"\tINDEX available_at (available_at),\n" +
			"\tINDEX owner (owner(255))\n" +
			") ENGINE=InnoDB",
		"INSERT INTO `orders.timeouts` VALUES ('old', 'orders', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '', '', '', 0)",
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
	config := mysql.Config{DSN: dsn, Endpoint: "orders"}
	before, err := mysql.Open(t.Context(), config)
	require.NoError(t, err)
	sqlstoretest.OldTableChecked(t, before, "orders.timeouts")
	require.NoError(t, before.Close())
	sqlstoretest.SetupAtOnce(t, func(ctx context.Context) (*mysql.Store, error) { return mysql.Open(ctx, config) },
		"instances migrating an old table at once")
	sqlstoretest.Migrated(t, open(t, config), "old")
}
