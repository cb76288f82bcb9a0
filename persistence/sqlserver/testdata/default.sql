-- name: setupSchema
IF SCHEMA_ID(N'dbo') IS NULL
	EXEC(N'CREATE SCHEMA [dbo]');

-- name: setupTable
IF NOT EXISTS (
	SELECT * FROM sys.objects
	WHERE object_id = OBJECT_ID(N'[dbo].[orders.timeouts]') AND type IN ('U')
)
BEGIN
	CREATE TABLE [dbo].[orders.timeouts] (
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
	WHERE name = 'Index_Time' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
)
BEGIN
	CREATE INDEX Index_Time ON [dbo].[orders.timeouts] (Time);
END
IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = 'Index_AvailableAt' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
)
BEGIN
	CREATE INDEX Index_AvailableAt ON [dbo].[orders.timeouts] (AvailableAt);
END
IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = 'Index_Owner' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
)
BEGIN
	CREATE INDEX Index_Owner ON [dbo].[orders.timeouts] (Owner);
END

-- name: installed
SELECT COUNT(*) + CASE WHEN COL_LENGTH(N'[dbo].[orders.timeouts]', 'ParkedReason') IS NULL THEN 0 ELSE 1 END FROM sys.indexes
WHERE object_id = OBJECT_ID(N'[dbo].[orders.timeouts]', 'U') AND name IN ('Index_Time', 'Index_AvailableAt', 'Index_Owner', 'Index_DedupKey', 'Index_ClaimedBy')

-- name: lockSetup
DECLARE @result int;
EXEC @result = sp_getapplock @Resource = N'timeoutmill:setup-infrastructure', @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 60000;
IF @result < 0
	RAISERROR(N'timeoutmill: timed out waiting for another instance to set up the table', 16, 1);

-- name: store
INSERT INTO [dbo].[orders.timeouts] (Id, Destination, State, Time, Headers, RetryCount, AvailableAt, Owner)
SELECT @id, @destination, @state, CAST(@due AS datetime2(7)), @headers, @failureCount, CAST(@due AS datetime2(7)), @owner
WHERE NOT EXISTS (SELECT 1 FROM [dbo].[orders.timeouts] WHERE Id = @id);
SELECT @@ROWCOUNT;

-- name: next
SELECT TODATETIMEOFFSET(MIN(AvailableAt), 0) FROM [dbo].[orders.timeouts]

-- name: now
SELECT TODATETIMEOFFSET(SYSUTCDATETIME(), 0)

-- name: claim
WITH claimable AS (
	SELECT TOP (@limit) Id, Time, AvailableAt, ClaimedBy
	FROM [dbo].[orders.timeouts] WITH (INDEX(Index_AvailableAt), READPAST, UPDLOCK, ROWLOCK)
	WHERE AvailableAt <= CAST(@now AS datetime2(7))
	ORDER BY AvailableAt
)
UPDATE claimable SET AvailableAt = CAST(@until AS datetime2(7)), ClaimedBy = @by
OUTPUT inserted.Id, TODATETIMEOFFSET(inserted.Time, 0);

-- name: peek
SELECT Destination, TODATETIMEOFFSET(Time, 0), Owner, State, Headers, RetryCount, COALESCE(DedupKey, N''), COALESCE(ParkedReason, N'') FROM [dbo].[orders.timeouts] WHERE Id = @id

-- name: delete
DELETE FROM [dbo].[orders.timeouts] WHERE Id = @id;
SELECT @@ROWCOUNT;

-- name: incrementFailureCount
UPDATE [dbo].[orders.timeouts] SET RetryCount = RetryCount + 1 WHERE Id = @id;
SELECT @@ROWCOUNT;

-- name: cancelByOwner
DELETE FROM [dbo].[orders.timeouts] WHERE Owner = @owner;
SELECT @@ROWCOUNT;

-- name: addKey
IF COL_LENGTH(N'[dbo].[orders.timeouts]', 'DedupKey') IS NULL
	ALTER TABLE [dbo].[orders.timeouts] ADD DedupKey nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL;

-- name: keyIndex
IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = 'Index_DedupKey' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
)
BEGIN
	CREATE UNIQUE INDEX Index_DedupKey ON [dbo].[orders.timeouts] (DedupKey) WHERE DedupKey IS NOT NULL;
END

-- name: stats
SELECT COUNT(*), SUM(CASE WHEN Time <= CAST(@now AS datetime2(7)) AND ParkedReason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN AvailableAt <> Time AND AvailableAt > CAST(@now AS datetime2(7)) AND ParkedReason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN ParkedReason IS NOT NULL THEN 1 ELSE 0 END), TODATETIMEOFFSET(MIN(Time), 0), TODATETIMEOFFSET(MAX(Time), 0)
FROM [dbo].[orders.timeouts]

-- name: statsByDestination
SELECT Destination, COUNT(*) FROM [dbo].[orders.timeouts] GROUP BY Destination

-- name: exists
SELECT 1 FROM [dbo].[orders.timeouts] WHERE Id = @id

-- name: keyHolder
SELECT Id, TODATETIMEOFFSET(Time, 0), TODATETIMEOFFSET(AvailableAt, 0) FROM [dbo].[orders.timeouts] WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
WHERE DedupKey = @key AND DedupKey IS NOT NULL

-- name: dropKey
UPDATE [dbo].[orders.timeouts] SET DedupKey = NULL WHERE Id = @id;
SELECT @@ROWCOUNT;

-- name: schedule
INSERT INTO [dbo].[orders.timeouts] (Id, Destination, State, Time, Headers, RetryCount, AvailableAt, Owner, DedupKey)
SELECT @id, @destination, @state, CAST(@due AS datetime2(7)), @headers, @failureCount, CAST(@due AS datetime2(7)), @owner, @key
WHERE NOT EXISTS (SELECT 1 FROM [dbo].[orders.timeouts] WHERE Id = @id)
	AND NOT EXISTS (SELECT 1 FROM [dbo].[orders.timeouts] WHERE DedupKey = @key AND DedupKey IS NOT NULL);
SELECT @@ROWCOUNT;

-- name: reschedule
UPDATE [dbo].[orders.timeouts] SET Time = CAST(@due AS datetime2(7)), AvailableAt = CAST(@due AS datetime2(7))
WHERE Id = @id AND (AvailableAt = Time OR AvailableAt <= CAST(@now AS datetime2(7))) AND ParkedReason IS NULL;
SELECT @@ROWCOUNT;

-- name: addParked
IF COL_LENGTH(N'[dbo].[orders.timeouts]', 'ParkedReason') IS NULL
	ALTER TABLE [dbo].[orders.timeouts] ADD ParkedReason nvarchar(2000) NULL, ClaimedBy nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL;

-- name: claimedByIndex
IF NOT EXISTS (
	SELECT * FROM sys.indexes
	WHERE name = 'Index_ClaimedBy' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')
)
BEGIN
	CREATE INDEX Index_ClaimedBy ON [dbo].[orders.timeouts] (ClaimedBy) WHERE ClaimedBy IS NOT NULL;
END

-- name: park
UPDATE [dbo].[orders.timeouts] SET AvailableAt = CAST(@parkedAt AS datetime2(7)), ParkedReason = @reason, ClaimedBy = NULL, DedupKey = NULL
WHERE Id = @id;
SELECT @@ROWCOUNT;

-- name: releaseClaimsOf
UPDATE [dbo].[orders.timeouts] SET AvailableAt = Time, ClaimedBy = NULL
WHERE ClaimedBy = @instance AND ClaimedBy IS NOT NULL AND AvailableAt <> Time AND AvailableAt < CAST(@hiddenFrom AS datetime2(7)) AND ParkedReason IS NULL;
SELECT @@ROWCOUNT;

-- name: holdInstance
DECLARE @result int;
EXEC @result = sp_getapplock @Resource = @resource, @LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = 0;
SELECT @result;

-- name: releaseInstance
EXEC sp_releaseapplock @Resource = @resource, @LockOwner = 'Session';

-- name: list
SELECT TOP (@limit) Id, Destination, TODATETIMEOFFSET(Time, 0), Owner, Headers, RetryCount, COALESCE(DedupKey, N''), COALESCE(ParkedReason, N'') FROM [dbo].[orders.timeouts]
ORDER BY Time, Id

-- name: listFiltered
SELECT TOP (@limit) Id, Destination, TODATETIMEOFFSET(Time, 0), Owner, Headers, RetryCount, COALESCE(DedupKey, N''), COALESCE(ParkedReason, N'') FROM [dbo].[orders.timeouts]
WHERE Owner = @owner AND Owner <> ''
	AND Destination = @destination
	AND DedupKey = @key
	AND Time >= CAST(@dueFrom AS datetime2(7))
	AND Time < CAST(@dueBefore AS datetime2(7))
	AND Time >= CAST(@afterDue AS datetime2(7)) AND (Time > CAST(@afterDue AS datetime2(7)) OR Time = CAST(@afterDue AS datetime2(7)) AND Id > @afterID)
ORDER BY Time, Id

-- name: storeMany(2)
INSERT INTO [dbo].[orders.timeouts] (Id, Destination, State, Time, Headers, RetryCount, AvailableAt, Owner)
OUTPUT inserted.Id
SELECT fresh.Id, fresh.Destination, fresh.State, CAST(fresh.Due AS datetime2(7)), fresh.Headers, fresh.RetryCount, CAST(fresh.Due AS datetime2(7)), fresh.Owner
FROM (VALUES
	(@id0, @destination0, @state0, @due0, @headers0, @failureCount0, @owner0),
	(@id1, @destination1, @state1, @due1, @headers1, @failureCount1, @owner1)
) AS fresh (Id, Destination, State, Due, Headers, RetryCount, Owner)
WHERE NOT EXISTS (SELECT 1 FROM [dbo].[orders.timeouts] AS stored WHERE stored.Id = fresh.Id);

-- name: peekMany(2)
SELECT Id, Destination, TODATETIMEOFFSET(Time, 0), Owner, State, Headers, RetryCount, COALESCE(DedupKey, N''), COALESCE(ParkedReason, N'') FROM [dbo].[orders.timeouts] WHERE Id IN (@id0, @id1)

-- name: removeMany(2)
DELETE FROM [dbo].[orders.timeouts]
OUTPUT deleted.Id
WHERE Id IN (@id0, @id1);

-- name: releaseMany(2)
UPDATE [dbo].[orders.timeouts] SET AvailableAt = Time, ClaimedBy = NULL WHERE Id IN (@id0, @id1) AND ParkedReason IS NULL;
SELECT @@ROWCOUNT;

-- name: unparkMany(2)
UPDATE [dbo].[orders.timeouts] SET AvailableAt = Time, RetryCount = 0, ParkedReason = NULL, ClaimedBy = NULL
WHERE Id IN (@id0, @id1) AND ParkedReason IS NOT NULL;
SELECT @@ROWCOUNT;

-- name: deleteParkedMany(2)
DELETE FROM [dbo].[orders.timeouts] WHERE Id IN (@id0, @id1) AND ParkedReason IS NOT NULL;
SELECT @@ROWCOUNT;

