package sqlserver_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore/sqlstoretest"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
)

// TestScheduleTx: scheduling in the caller's transaction, on a store and transactions that share
// the caller's pool.
func TestScheduleTx(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	db := openDB(t, dsn)
	store, err := sqlserver.New(db, sqlserver.Config{Table: table(t, dsn, "dbo")})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(t.Context()))
	sqlstoretest.ScheduleTx(t, db, store)
}

// TestMigratesOldTable: a table of the shape an older version created, with a timeout in it,
// gets the key column and its filtered unique index from SetupInfrastructure.
func TestMigratesOldTable(t *testing.T) {
	t.Parallel()
	dsn := testenv.SQLServerDSN(t)
	name := table(t, dsn, "dbo")
	exec(t, dsn, `CREATE TABLE [dbo].`+quote(name)+` (
	Id nvarchar(250) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,
	Destination nvarchar(250) NOT NULL,
	State varbinary(max),
	Time datetime2(7) NOT NULL,
	Headers varbinary(max) NOT NULL,
	RetryCount INT NOT NULL DEFAULT(0),
	AvailableAt datetime2(7) NOT NULL,
	Owner nvarchar(250) COLLATE Latin1_General_100_BIN2 NOT NULL DEFAULT(N'')
)`)
	exec(t, dsn, `CREATE INDEX Index_Time ON [dbo].`+quote(name)+` (Time)`)
	exec(t, dsn, `INSERT INTO [dbo].`+quote(name)+` VALUES (N'old', N'orders', 0x, SYSUTCDATETIME(), 0x, 0, SYSUTCDATETIME(), N'')`)
	sqlstoretest.Migrated(t, open(t, sqlserver.Config{DSN: dsn, Table: name}), "old")
}
