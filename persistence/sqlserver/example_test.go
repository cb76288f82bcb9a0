package sqlserver_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
)

// ExampleSetupScript prints the T-SQL that SetupInfrastructure runs for the endpoint "orders",
// which a DBA can run by hand instead: the seed's table, with datetime2 times and the claim,
// owner, key, parking and claiming-instance columns, in the default schema dbo.
func ExampleSetupScript() {
	script, err := sqlserver.SetupScript(sqlserver.Config{Endpoint: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(script)
	// Output:
	// IF SCHEMA_ID(N'dbo') IS NULL
	// 	EXEC(N'CREATE SCHEMA [dbo]');
	// GO
	// IF NOT EXISTS (
	// 	SELECT * FROM sys.objects
	// 	WHERE object_id = OBJECT_ID(N'[dbo].[orders.timeouts]') AND type IN ('U')
	// )
	// BEGIN
	// 	CREATE TABLE [dbo].[orders.timeouts] (
	// 		Id nvarchar(250) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,
	// 		Destination nvarchar(250) NOT NULL,
	// 		State varbinary(max),
	// 		Time datetime2(7) NOT NULL,
	// 		Headers varbinary(max) NOT NULL,
	// 		RetryCount INT NOT NULL DEFAULT(0),
	// 		AvailableAt datetime2(7) NOT NULL,
	// 		Owner nvarchar(250) COLLATE Latin1_General_100_BIN2 NOT NULL DEFAULT(N''),
	// 		DedupKey nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL,
	// 		ParkedReason nvarchar(2000) NULL,
	// 		ClaimedBy nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL
	// 	);
	// END
	// IF NOT EXISTS (
	// 	SELECT * FROM sys.indexes
	// 	WHERE name = 'Index_Time' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
	// )
	// BEGIN
	// 	CREATE INDEX Index_Time ON [dbo].[orders.timeouts] (Time);
	// END
	// IF NOT EXISTS (
	// 	SELECT * FROM sys.indexes
	// 	WHERE name = 'Index_AvailableAt' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
	// )
	// BEGIN
	// 	CREATE INDEX Index_AvailableAt ON [dbo].[orders.timeouts] (AvailableAt);
	// END
	// IF NOT EXISTS (
	// 	SELECT * FROM sys.indexes
	// 	WHERE name = 'Index_Owner' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
	// )
	// BEGIN
	// 	CREATE INDEX Index_Owner ON [dbo].[orders.timeouts] (Owner);
	// END
	// GO
	// IF COL_LENGTH(N'[dbo].[orders.timeouts]', 'DedupKey') IS NULL
	// 	ALTER TABLE [dbo].[orders.timeouts] ADD DedupKey nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL;
	// GO
	// IF NOT EXISTS (
	// 	SELECT * FROM sys.indexes
	// 	WHERE name = 'Index_DedupKey' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
	// )
	// BEGIN
	// 	CREATE UNIQUE INDEX Index_DedupKey ON [dbo].[orders.timeouts] (DedupKey) WHERE DedupKey IS NOT NULL;
	// END
	// GO
	// IF COL_LENGTH(N'[dbo].[orders.timeouts]', 'ParkedReason') IS NULL
	// 	ALTER TABLE [dbo].[orders.timeouts] ADD ParkedReason nvarchar(2000) NULL, ClaimedBy nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL;
	// GO
	// IF NOT EXISTS (
	// 	SELECT * FROM sys.indexes
	// 	WHERE name = 'Index_ClaimedBy' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
	// )
	// BEGIN
	// 	CREATE INDEX Index_ClaimedBy ON [dbo].[orders.timeouts] (ClaimedBy) WHERE ClaimedBy IS NOT NULL;
	// END
}

// ExampleConfig_String: a Config can be logged; its DSN's password is not.
func ExampleConfig_String() {
	config := sqlserver.Config{DSN: "sqlserver://timeoutmill:secret@db.internal?database=app", Endpoint: "orders"}
	fmt.Println(config)
	// Output:
	// sqlserver.Config{DSN: "sqlserver://timeoutmill:xxxxx@db.internal?database=app", Endpoint: "orders", Schema: "", Table: "", MaxOpenConns: 0}
}

// ExampleConfig_Validate shows which names a store accepts. Quotes, brackets and semicolons are
// fine: names are always bracketed. A name SQL Server cannot hold, or would take for another, is
// refused.
func ExampleConfig_Validate() {
	for _, config := range []sqlserver.Config{
		{Endpoint: "orders"},
		{Endpoint: `it's [orders]; DROP TABLE users; --`},
		{Endpoint: strings.Repeat("x", 120)},
		{Endpoint: "orders", Schema: "sales "},
	} {
		fmt.Println(config.Validate())
	}
	// Output:
	// <nil>
	// <nil>
	// sqlserver: invalid config: Table "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.timeouts" is longer than 128 UTF-16 code units, SQL Server's limit for a name (with the default Table, Endpoint may have at most 119)
	// sqlserver: invalid config: Schema "sales " ends with a space, which SQL Server drops from names, so it would name another object
}
