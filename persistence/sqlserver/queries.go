package sqlserver

import (
	"fmt"
	"strings"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// queries holds the store's SQL, made once with the schema and table names quoted.
type queries struct {
	// table is the quoted, schema-qualified table name, for messages.
	table string

	setupSchema           string
	setupTable            string
	addKey                string
	keyIndex              string
	addParked             string
	installed             string
	claimedByIndex        string
	lockSetup             string
	store                 string
	next                  string
	now                   string
	claim                 string
	peek                  string
	delete                string
	incrementFailureCount string
	cancelByOwner         string
	stats                 string
	statsByDestination    string
	list                  sqlstore.ListSQL
	exists                string
	keyHolder             string
	dropKey               string
	schedule              string
	reschedule            string
	park                  string
	releaseClaimsOf       string
}

// Names of the indexes. SQL Server names indexes per table, so they need no prefix.
const (
	indexTime        = "Index_Time"
	indexAvailableAt = "Index_AvailableAt"
	indexOwner       = "Index_Owner"
	indexDedupKey    = "Index_DedupKey"
	indexClaimedBy   = "Index_ClaimedBy"
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
		Owner nvarchar(250) COLLATE Latin1_General_100_BIN2 NOT NULL DEFAULT(N''),
		DedupKey nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL,
		ParkedReason nvarchar(2000) NULL,
		ClaimedBy nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL
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

		// A table an older version created gets the key column, in a batch of its own so that the
		// next batch, compiled after it ran, can name the column.
		addKey: fmt.Sprintf(`IF COL_LENGTH(%s, 'DedupKey') IS NULL
	ALTER TABLE %s ADD DedupKey nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL;
`, tName, t),
		// Filtered: unique among the keys, while any number of rows have none. DML on a table with
		// a filtered index needs ANSI_NULLS and QUOTED_IDENTIFIER ON, the drivers' defaults.
		keyIndex: fmt.Sprintf(`IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = '%[3]s' AND object_id = OBJECT_ID(%[1]s)
)
BEGIN
	CREATE UNIQUE INDEX %[3]s ON %[2]s (DedupKey) WHERE DedupKey IS NOT NULL;
END
`, tName, t, indexDedupKey),
		// A table an older version created gets the parking reason (2000 bytes of UTF-8 are at
		// most 2000 UTF-16 code units) and the claiming instance, nullable, without an index.
		addParked: fmt.Sprintf(`IF COL_LENGTH(%s, 'ParkedReason') IS NULL
	ALTER TABLE %s ADD ParkedReason nvarchar(2000) NULL, ClaimedBy nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL;
`, tName, t),
		// ReleaseClaimsOf's lookup, at a manager's start and after a claim whose answer was lost:
		// without it the statement reads the whole table, for longer than a call may take once the
		// table holds millions. Filtered: only rows a named instance holds claimed have an entry.
		// In a batch of its own, after the one that adds the column to an older table.
		claimedByIndex: fmt.Sprintf(`IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = '%[3]s' AND object_id = OBJECT_ID(%[1]s)
)
BEGIN
	CREATE INDEX %[3]s ON %[2]s (ClaimedBy) WHERE ClaimedBy IS NOT NULL;
END
`, tName, t, indexClaimedBy),
		// The indexes, and the columns the last version added: installedCount when set up.
		installed: fmt.Sprintf(`SELECT COUNT(*) + CASE WHEN COL_LENGTH(%[1]s, 'ParkedReason') IS NULL THEN 0 ELSE 1 END FROM sys.indexes
WHERE object_id = OBJECT_ID(%[1]s, 'U') AND name IN ('%[2]s', '%[3]s', '%[4]s', '%[5]s', '%[6]s')`,
			tName, indexTime, indexAvailableAt, indexOwner, indexDedupKey, indexClaimedBy),
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
		// The server's clock in UTC, to the 100 ns (persistence.Clocked).
		now: `SELECT ` + toUTC("SYSUTCDATETIME()"),
		// One statement: lock the earliest claimable rows, skipping rows another claim holds,
		// and move them to the end of the lease. The index hint makes the claim read AvailableAt
		// in order and stop at @limit, so it locks only the rows it claims; a scan and sort would
		// lock every due row and other pollers would skip them all.
		// The claiming instance (@by, NULL for none) is set in the same UPDATE.
		claim: fmt.Sprintf(`WITH claimable AS (
	SELECT TOP (@limit) Id, Time, AvailableAt, ClaimedBy
	FROM %s WITH (INDEX(%s), READPAST, UPDLOCK, ROWLOCK)
	WHERE AvailableAt <= %s
	ORDER BY AvailableAt
)
UPDATE claimable SET AvailableAt = %s, ClaimedBy = @by
OUTPUT inserted.Id, %s;`, t, indexAvailableAt, toDateTime2("@now"), toDateTime2("@until"), toUTC("inserted.Time")),
		peek: fmt.Sprintf(`SELECT Destination, %s, Owner, State, Headers, RetryCount, %s, %s FROM %s WHERE Id = @id`, toUTC("Time"), readKey, readParked, t),
		delete: fmt.Sprintf(`DELETE FROM %s WHERE Id = @id;
SELECT @@ROWCOUNT;`, t),
		incrementFailureCount: fmt.Sprintf(`UPDATE %s SET RetryCount = RetryCount + 1 WHERE Id = @id;
SELECT @@ROWCOUNT;`, t),
		cancelByOwner: fmt.Sprintf(`DELETE FROM %s WHERE Owner = @owner;
SELECT @@ROWCOUNT;`, t),
		// A row is claimed at now while its AvailableAt is neither its due time nor past.
		stats: fmt.Sprintf(`SELECT COUNT(*), SUM(CASE WHEN Time <= %[2]s AND ParkedReason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN AvailableAt <> Time AND AvailableAt > %[2]s AND ParkedReason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN ParkedReason IS NOT NULL THEN 1 ELSE 0 END), %[3]s, %[4]s
FROM %[1]s`, t, toDateTime2("@now"), toUTC("MIN(Time)"), toUTC("MAX(Time)")),
		statsByDestination: fmt.Sprintf(`SELECT Destination, COUNT(*) FROM %s GROUP BY Destination`, t),
		list: sqlstore.ListSQL{
			From: fmt.Sprintf(`Id, Destination, %s, Owner, Headers, RetryCount, %s, %s FROM %s`, toUTC("Time"), readKey, readParked, t),
			ID:   "Id", Due: "Time", Owner: "Owner", Destination: "Destination", Key: "DedupKey", Parked: "ParkedReason",
			Top: true, TimeParam: toDateTime2,
		},
		exists: fmt.Sprintf(`SELECT 1 FROM %s WHERE Id = @id`, t),
		// HOLDLOCK: when no row holds the key, the range where it would be stays locked, so that
		// Schedules of one key take turns.
		keyHolder: fmt.Sprintf(`SELECT Id, %s, %s FROM %s WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
WHERE DedupKey = @key AND DedupKey IS NOT NULL`, toUTC("Time"), toUTC("AvailableAt"), t),
		dropKey: fmt.Sprintf(`UPDATE %s SET DedupKey = NULL WHERE Id = @id;
SELECT @@ROWCOUNT;`, t),
		// Store's guarded insert, guarded on the key too: a taken id or key inserts nothing. Two
		// at once that both pass the guard meet the primary key or the unique index, whose error
		// (which leaves the transaction usable under XACT_ABORT OFF) means the same.
		schedule: fmt.Sprintf(`INSERT INTO %[1]s (Id, Destination, State, Time, Headers, RetryCount, AvailableAt, Owner, DedupKey)
SELECT @id, @destination, @state, %[2]s, @headers, @failureCount, %[2]s, @owner, @key
WHERE NOT EXISTS (SELECT 1 FROM %[1]s WHERE Id = @id)
	AND NOT EXISTS (SELECT 1 FROM %[1]s WHERE DedupKey = @key AND DedupKey IS NOT NULL);
SELECT @@ROWCOUNT;`, t, toDateTime2("@due")),
		reschedule: fmt.Sprintf(`UPDATE %s SET Time = %s, AvailableAt = %s
WHERE Id = @id AND (AvailableAt = Time OR AvailableAt <= %s) AND ParkedReason IS NULL;
SELECT @@ROWCOUNT;`, t, toDateTime2("@due"), toDateTime2("@due"), toDateTime2("@now")),
		// A parked row's AvailableAt is MaxDue (@parkedAt), beyond every claim.
		park: fmt.Sprintf(`UPDATE %s SET AvailableAt = %s, ParkedReason = @reason, ClaimedBy = NULL, DedupKey = NULL
WHERE Id = @id;
SELECT @@ROWCOUNT;`, t, toDateTime2("@parkedAt")),
		// ClaimedBy IS NOT NULL, implied by the equality, spells out the filter of the index for
		// the optimizer, which matches a filtered index to a parameterised query by its text.
		releaseClaimsOf: fmt.Sprintf(`UPDATE %s SET AvailableAt = Time, ClaimedBy = NULL
WHERE ClaimedBy = @instance AND ClaimedBy IS NOT NULL AND AvailableAt <> Time AND AvailableAt < %s AND ParkedReason IS NULL;
SELECT @@ROWCOUNT;`, t, toDateTime2("@hiddenFrom")),
	}
}

// readParked reads the parking reason, empty for none.
const readParked = "COALESCE(ParkedReason, N'')"

// readKey reads the key column, empty for none.
const readKey = "COALESCE(DedupKey, N'')"

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
	return []string{q.setupSchema, q.setupTable, q.addKey, q.keyIndex, q.addParked, q.claimedByIndex}
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
