package sqlserver

import (
	"fmt"
	"strings"
)

// queries holds the store's SQL, made once with the schema and table names quoted.
type queries struct {
	// table is the quoted, schema-qualified table name, for messages.
	table string

	setupSchema           string
	setupTable            string
	installed             string
	lockSetup             string
	store                 string
	next                  string
	claim                 string
	peek                  string
	delete                string
	incrementFailureCount string
	cancelByOwner         string
	stats                 string
	list                  string
	listByOwner           string
}

// Names of the indexes. SQL Server names indexes per table, so they need no prefix.
const (
	indexTime        = "Index_Time"
	indexAvailableAt = "Index_AvailableAt"
	indexOwner       = "Index_Owner"
)

// setupLockResource names the application lock that SetupInfrastructure holds, per database.
const setupLockResource = "timeoutmill:setup-infrastructure"

// newQueries builds the SQL for names that passed validateIdentifier. Names are pasted only
// bracketed by quoteIdent, or, where T-SQL wants a name as a string (OBJECT_ID, EXEC), bracketed
// and then quoted by quoteString; every value is a parameter.
//
// The columns are the seed's (Id, Destination, State, Time, Headers, RetryCount) and two more:
// AvailableAt, when a row can next be claimed (its due time until it is claimed, then the end of
// the claim's lease), and Owner, for CancelByOwner. Claims and Next use AvailableAt's index, and
// no watermark is kept, so a timeout committed late is still found (NServiceBus#3500).
func newQueries(schema, table string) queries {
	s := quoteIdent(schema)
	t := s + "." + quoteIdent(table)
	tName := quoteString(t)
	return queries{
		table: t,

		// CREATE SCHEMA must be alone in its batch, hence EXEC; and a batch of its own before the
		// table's, so that the CREATE TABLE never names a schema its own batch created.
		setupSchema: fmt.Sprintf(`IF SCHEMA_ID(%s) IS NULL
	EXEC(%s);
`, quoteString(schema), quoteString("CREATE SCHEMA "+s)),
		// The seed's script, made idempotent the seed's way, for the columns below. Id and Owner
		// compare code point by code point (BIN2), whatever the database's collation: under a
		// case-insensitive one, "A" and "a" would be one id and a second timeout would be lost.
		setupTable: fmt.Sprintf(`IF NOT EXISTS (
	SELECT * FROM sys.objects
	WHERE object_id = OBJECT_ID(%[1]s) AND type IN ('U')
)
BEGIN
	CREATE TABLE %[2]s (
		Id nvarchar(250) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,
		Destination nvarchar(250) NOT NULL,
		State varbinary(max),
		Time datetime2(7) NOT NULL,
		Headers varbinary(max) NOT NULL,
		RetryCount INT NOT NULL DEFAULT(0),
		AvailableAt datetime2(7) NOT NULL,
		Owner nvarchar(250) COLLATE Latin1_General_100_BIN2 NOT NULL DEFAULT(N'')
	);
END
IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = '%[3]s' AND object_id = OBJECT_ID(%[1]s)
)
BEGIN
	CREATE INDEX %[3]s ON %[2]s (Time);
END
IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = '%[4]s' AND object_id = OBJECT_ID(%[1]s)
)
BEGIN
	CREATE INDEX %[4]s ON %[2]s (AvailableAt);
END
IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = '%[5]s' AND object_id = OBJECT_ID(%[1]s)
)
BEGIN
	CREATE INDEX %[5]s ON %[2]s (Owner);
END
`, tName, t, indexTime, indexAvailableAt, indexOwner),

		installed: fmt.Sprintf(`SELECT COUNT(*) FROM sys.indexes
WHERE object_id = OBJECT_ID(%s, 'U') AND name IN ('%s', '%s', '%s')`, tName, indexTime, indexAvailableAt, indexOwner),
		// Instances starting together would race between IF NOT EXISTS and CREATE (error 2714):
		// the first to get the lock creates, the others then find everything there.
		lockSetup: fmt.Sprintf(`DECLARE @result int;
EXEC @result = sp_getapplock @Resource = %s, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 60000;
IF @result < 0
	RAISERROR(N'timeoutmill: timed out waiting for another instance to set up the table', 16, 1);`,
			quoteString(setupLockResource)),

		// NOT EXISTS makes a redelivered timeout a no-op without an error; two Stores of one new
		// id at once still meet the primary key, whose error Store reads as "stored already".
		// @@ROWCOUNT, not the driver's rows-affected count, which SET NOCOUNT ON would zero.
		store: fmt.Sprintf(`INSERT INTO %[1]s (Id, Destination, State, Time, Headers, RetryCount, AvailableAt, Owner)
SELECT @id, @destination, @state, %[2]s, @headers, @failureCount, %[2]s, @owner
WHERE NOT EXISTS (SELECT 1 FROM %[1]s WHERE Id = @id);
SELECT @@ROWCOUNT;`, t, toDateTime2("@due")),
		next: fmt.Sprintf(`SELECT %s FROM %s`, toUTC("MIN(AvailableAt)"), t),
		// One statement: lock the earliest claimable rows, skipping rows another claim holds,
		// and move them to the end of the lease. The index hint makes the claim read AvailableAt
		// in order and stop at @limit, so it locks only the rows it claims; a scan and sort would
		// lock every due row and other pollers would skip them all.
		claim: fmt.Sprintf(`WITH claimable AS (
	SELECT TOP (@limit) Id, Time, AvailableAt
	FROM %s WITH (INDEX(%s), READPAST, UPDLOCK, ROWLOCK)
	WHERE AvailableAt <= %s
	ORDER BY AvailableAt
)
UPDATE claimable SET AvailableAt = %s
OUTPUT inserted.Id, %s;`, t, indexAvailableAt, toDateTime2("@now"), toDateTime2("@until"), toUTC("inserted.Time")),
		peek: fmt.Sprintf(`SELECT Destination, %s, Owner, State, Headers, RetryCount FROM %s WHERE Id = @id`, toUTC("Time"), t),
		delete: fmt.Sprintf(`DELETE FROM %s WHERE Id = @id;
SELECT @@ROWCOUNT;`, t),
		incrementFailureCount: fmt.Sprintf(`UPDATE %s SET RetryCount = RetryCount + 1 WHERE Id = @id;
SELECT @@ROWCOUNT;`, t),
		cancelByOwner: fmt.Sprintf(`DELETE FROM %s WHERE Owner = @owner;
SELECT @@ROWCOUNT;`, t),
		stats: fmt.Sprintf(`SELECT COUNT(*), %s, %s FROM %s`, toUTC("MIN(Time)"), toUTC("MAX(Time)"), t),
		list: fmt.Sprintf(`SELECT TOP (@limit) Id, Destination, %s, Owner, Headers, RetryCount FROM %s
ORDER BY Time, Id`, toUTC("Time"), t),
		listByOwner: fmt.Sprintf(`SELECT TOP (@limit) Id, Destination, %s, Owner, Headers, RetryCount FROM %s
WHERE Owner = @owner ORDER BY Time, Id`, toUTC("Time"), t),
	}
}

// Times travel as datetimeoffset at +00:00, which go-mssqldb writes and reads as instants: a
// datetime2 it would write and read as a wall clock in the DSN's timezone, and in a zone with
// daylight saving time one hour a year has no wall clock (02:30 on the morning clocks go forward
// would become 03:30). The columns stay datetime2 in UTC, as the seed's; the conversions are on
// the parameters' side, so that comparisons still use the indexes.

// toDateTime2 converts a datetimeoffset parameter sent at +00:00 to the datetime2 the columns
// hold: the same fields, offset dropped.
func toDateTime2(param string) string {
	return "CAST(" + param + " AS datetime2(7))"
}

// toUTC returns a datetime2 column as a datetimeoffset at +00:00, the same fields marked UTC.
func toUTC(expr string) string {
	return "TODATETIMEOFFSET(" + expr + ", 0)"
}

// setupBatches are the batches SetupInfrastructure runs, in order.
func (q queries) setupBatches() []string {
	return []string{q.setupSchema, q.setupTable}
}

// SetupScript returns the T-SQL that SetupInfrastructure runs for config: it creates the schema,
// the table and its indexes where they are missing, and can be run again safely. Its batches are
// separated by GO lines, so that a DBA can run it as it is in sqlcmd or SSMS, and the store's
// login then needs no right to create tables.
func SetupScript(config Config) (string, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return "", err
	}
	return strings.Join(newQueries(config.Schema, config.Table).setupBatches(), "GO\n"), nil
}
