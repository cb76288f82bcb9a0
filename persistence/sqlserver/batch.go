package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// Bounds of one statement of a batch call, below the 2,100 parameters a request may carry:
// maxStoreRows rows of 7 parameters, maxIn ids.
const (
	maxStoreRows = 250
	maxIn        = 500
)

// errDeadlock is the error of a transaction SQL Server chose as a deadlock victim and rolled back.
const errDeadlock = 1205

// storeManyColumns are the columns of the rows StoreMany sends, in order, named as the
// statement's parameters are (with the row's index appended).
var storeManyColumns = []string{"id", "destination", "state", "due", "headers", "failureCount", "owner"}

// storeMany inserts the rows among n that are not stored yet and returns their ids: Store's
// statement for n rows at once, a table value constructor instead of parameters.
func (q queries) storeMany(n int) string {
	rows := make([]string, n)
	for i := range n {
		params := make([]string, len(storeManyColumns))
		for j, c := range storeManyColumns {
			params[j] = "@" + c + strconv.Itoa(i)
		}
		rows[i] = "\t(" + strings.Join(params, ", ") + ")"
	}
	return fmt.Sprintf(`INSERT INTO %[1]s (Id, Destination, State, Time, Headers, RetryCount, AvailableAt, Owner)
OUTPUT inserted.Id
SELECT fresh.Id, fresh.Destination, fresh.State, %[2]s, fresh.Headers, fresh.RetryCount, %[2]s, fresh.Owner
FROM (VALUES
%[3]s
) AS fresh (Id, Destination, State, Due, Headers, RetryCount, Owner)
WHERE NOT EXISTS (SELECT 1 FROM %[1]s AS stored WHERE stored.Id = fresh.Id);`, q.table, toDateTime2("fresh.Due"), strings.Join(rows, ",\n"))
}

// idList returns "@id0, @id1, …" for n ids, as sqlstore.IDsNamed binds them.
func idList(n int) string {
	params := make([]string, n)
	for i := range n {
		params[i] = "@id" + strconv.Itoa(i)
	}
	return strings.Join(params, ", ")
}

// peekMany reads the timeouts with n ids.
func (q queries) peekMany(n int) string {
	return fmt.Sprintf(`SELECT Id, Destination, %s, Owner, State, Headers, RetryCount, %s, %s FROM %s WHERE Id IN (%s)`,
		toUTC("Time"), readKey, readParked, q.table, idList(n))
}

// removeMany deletes the timeouts with n ids and returns the ids it deleted.
func (q queries) removeMany(n int) string {
	return fmt.Sprintf(`DELETE FROM %s
OUTPUT deleted.Id
WHERE Id IN (%s);`, q.table, idList(n))
}

// releaseMany makes the timeouts with n ids, parked ones left out, claimable again from their due
// time with no claiming instance, and returns how many it found.
func (q queries) releaseMany(n int) string {
	return fmt.Sprintf(`UPDATE %s SET AvailableAt = Time, ClaimedBy = NULL WHERE Id IN (%s) AND ParkedReason IS NULL;
SELECT @@ROWCOUNT;`, q.table, idList(n))
}

// unparkMany makes the parked timeouts among n ids claimable again from their due time, with
// their failure count at 0, and returns how many it unparked.
func (q queries) unparkMany(n int) string {
	return fmt.Sprintf(`UPDATE %s SET AvailableAt = Time, RetryCount = 0, ParkedReason = NULL, ClaimedBy = NULL
WHERE Id IN (%s) AND ParkedReason IS NOT NULL;
SELECT @@ROWCOUNT;`, q.table, idList(n))
}

// deleteParkedMany deletes the parked timeouts among n ids, and returns how many it deleted.
func (q queries) deleteParkedMany(n int) string {
	return fmt.Sprintf(`DELETE FROM %s WHERE Id IN (%s) AND ParkedReason IS NOT NULL;
SELECT @@ROWCOUNT;`, q.table, idList(n))
}

// storeRows inserts those of rows (at most maxStoreRows) that are not stored yet, with one
// statement.
func (s *Store) storeRows(ctx context.Context, db sqlstore.Querier, rows []sqlstore.Row) ([]string, error) {
	args := make([]any, 0, len(storeManyColumns)*len(rows))
	for i, r := range rows {
		n := strconv.Itoa(i)
		args = append(args,
			sql.Named("id"+n, r.T.ID),
			sql.Named("destination"+n, r.T.Destination),
			sql.Named("state"+n, r.Payload),
			sql.Named("due"+n, utc(r.Due)),
			sql.Named("headers"+n, r.Metadata),
			sql.Named("failureCount"+n, int64(r.T.FailureCount)),
			sql.Named("owner"+n, r.T.Owner),
		)
	}
	query := s.q.storeMany(len(rows))
	// Each run that meets the primary key finds one more id stored: at most one run more than
	// the chunk has rows.
	for run := 0; ; run++ {
		ids, err := sqlstore.QueryIDs(ctx, db, query, args)
		if isServerError(err, errDuplicateKey, errDuplicateKeyIndex) && run < len(rows) {
			continue
		}
		return ids, err
	}
}
