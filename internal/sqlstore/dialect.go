// Package sqlstore is the one implementation of persistence.Store, Inspector, Handover and the
// batch calls that the SQL backends share. A backend describes its database in a Dialect (its
// SQL, how it binds and reads values, what it runs differently) and wraps the Store this package
// makes in its own exported type. Statements are written with named parameters (@name) and
// compiled for each database at New.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Querier runs statements: a *sql.DB, a *sql.Tx, or a backend's wrapper of one.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Queries is a backend's SQL, written with named parameters (@name), which Compile rewrites in
// the dialect's Style. Each statement takes exactly the names of its Params (see params.go);
// empty is "none" where the comment says it may be.
type Queries struct {
	// Store inserts a timeout (StoreParams), @due as due and as available_at.
	Store string
	// Next selects the earliest available_at, or NULL.
	Next string
	// Now selects the database's current time in UTC, read when the statement runs (not when a
	// transaction began); empty for a database on the caller's machine (SQLite), whose clock is
	// the caller's. See persistence.Clocked.
	Now string
	// Claim moves up to @limit rows claimable at @now to @until, records @by as their claiming
	// instance, and returns their id and due (ClaimParams).
	Claim string
	// Peek selects destination, due, owner, payload, metadata, failure_count, key (empty for
	// none), parking reason (empty for none) of @id.
	Peek string
	// Delete and IncrementFailureCount change the row of @id.
	Delete, IncrementFailureCount string
	// CancelByOwner deletes the rows of @owner, when it is not empty.
	CancelByOwner string
	// Stats selects the count, how many are due at @now and not parked, how many are claimed at
	// @now and not parked, how many are parked (these three NULL for no rows), the earliest and
	// the latest due time.
	Stats string
	// StatsByDestination selects each destination and its count.
	StatsByDestination string
	// List is what List reads and the columns its filters compare (see ListSQL).
	List ListSQL
	// Exists selects a row when @id is stored, reading the latest committed row even in a
	// REPEATABLE READ transaction.
	Exists string
	// KeyLock, when set, takes a lock on @key until the transaction ends, so that Schedules of
	// one key queue for it rather than race for its row.
	KeyLock string
	// KeyHolder selects id, due, available_at of the row holding @key and locks it until the
	// transaction ends.
	KeyHolder string
	// DropKey sets the key of the row of @id to NULL.
	DropKey string
	// Schedule inserts a timeout as Store does, with @key (NULL for none), and inserts nothing,
	// without failing the transaction, when the id or the key is taken (or fails with an error
	// Errors.IsDuplicate accepts) (ScheduleParams).
	Schedule string
	// Reschedule moves the due time (and available_at) of the row of @id, pending at @now and
	// not parked, to @due.
	Reschedule string
	// Survey selects per destination its count, latest due and hidden count (available_at at
	// or after @hiddenFrom), of the rows due at or after @from, parked rows left out.
	Survey string
	// Hide moves up to @limit rows due at or after @from, not parked, that no poller holds at
	// @now, to @mark, records no claiming instance, and returns them whole (HideParams).
	Hide string
	// Park sets the row of @id aside: available_at to @parkedAt (persistence.MaxDue), @reason,
	// no claiming instance and no key.
	Park string
	// ReleaseClaimsOf moves the rows @instance holds claimed (not parked, not hidden: available_at
	// before @hiddenFrom) back to their due time, with no claiming instance.
	ReleaseClaimsOf string
	// PeekIn (id and the columns of Peek), RemoveIn (returning the ids deleted), ReleaseIn
	// (available_at back to due and no claiming instance, parked rows left alone) and UnparkIn
	// (parked rows back to due, failure count 0, no reason) and DeleteParkedIn (parked rows
	// deleted; a count, as UnparkIn) are made for n ids, with the placeholders Binding.IDArgs
	// binds. They take nothing but the ids.
	PeekIn, RemoveIn, ReleaseIn, UnparkIn, DeleteParkedIn func(n int) string
}

// Statements are a dialect's Queries compiled (see Compile).
type Statements struct {
	Store                                       Stmt[StoreParams]
	Next, Now, StatsByDestination               Stmt[NoParams]
	Claim                                       Stmt[ClaimParams]
	Peek, Delete, IncrementFailureCount, Exists Stmt[IDParams]
	DropKey                                     Stmt[IDParams]
	CancelByOwner                               Stmt[OwnerParams]
	Stats                                       Stmt[NowParams]
	KeyLock, KeyHolder                          Stmt[KeyParams]
	Schedule                                    Stmt[ScheduleParams]
	Reschedule                                  Stmt[RescheduleParams]
	Survey                                      Stmt[SurveyParams]
	Hide                                        Stmt[HideParams]
	Park                                        Stmt[ParkParams]
	ReleaseClaimsOf                             Stmt[InstanceParams]
}

// CompileQueries compiles every statement of q for binding; its error names the statement that
// failed.
func CompileQueries(q Queries, binding *Binding) (*Statements, error) {
	var (
		st   Statements
		errs []error
	)
	compile := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	var err error
	st.Store, err = Compile[StoreParams](binding, q.Store)
	compile("Store", err)
	st.Next, err = Compile[NoParams](binding, q.Next)
	compile("Next", err)
	st.Now, err = Compile[NoParams](binding, q.Now)
	compile("Now", err)
	st.StatsByDestination, err = Compile[NoParams](binding, q.StatsByDestination)
	compile("StatsByDestination", err)
	st.Claim, err = Compile[ClaimParams](binding, q.Claim)
	compile("Claim", err)
	st.Peek, err = Compile[IDParams](binding, q.Peek)
	compile("Peek", err)
	st.Delete, err = Compile[IDParams](binding, q.Delete)
	compile("Delete", err)
	st.IncrementFailureCount, err = Compile[IDParams](binding, q.IncrementFailureCount)
	compile("IncrementFailureCount", err)
	st.Exists, err = Compile[IDParams](binding, q.Exists)
	compile("Exists", err)
	st.DropKey, err = Compile[IDParams](binding, q.DropKey)
	compile("DropKey", err)
	st.CancelByOwner, err = Compile[OwnerParams](binding, q.CancelByOwner)
	compile("CancelByOwner", err)
	st.Stats, err = Compile[NowParams](binding, q.Stats)
	compile("Stats", err)
	st.KeyLock, err = Compile[KeyParams](binding, q.KeyLock)
	compile("KeyLock", err)
	st.KeyHolder, err = Compile[KeyParams](binding, q.KeyHolder)
	compile("KeyHolder", err)
	st.Schedule, err = Compile[ScheduleParams](binding, q.Schedule)
	compile("Schedule", err)
	st.Reschedule, err = Compile[RescheduleParams](binding, q.Reschedule)
	compile("Reschedule", err)
	st.Survey, err = Compile[SurveyParams](binding, q.Survey)
	compile("Survey", err)
	st.Hide, err = Compile[HideParams](binding, q.Hide)
	compile("Hide", err)
	st.Park, err = Compile[ParkParams](binding, q.Park)
	compile("Park", err)
	st.ReleaseClaimsOf, err = Compile[InstanceParams](binding, q.ReleaseClaimsOf)
	compile("ReleaseClaimsOf", err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &st, nil
}

// Dialect is what a backend tells the core about its database and its store, in groups: where
// statements run, its SQL, how it binds and reads values, how its errors read, its locks, what
// its columns accept, and the calls it runs its own way. Only Name, DB, SQL, Bind.Times and
// Locks.Hold are required.
type Dialect struct {
	// Name starts every error the store returns ("postgres").
	Name string
	// DB is the pool transactions begin on.
	DB *sql.DB
	// Close releases what the backend opened; Store.Close calls it once.
	Close func() error

	Run    Run
	SQL    Queries
	Bind   Binding
	Errors Errors
	Locks  Locks
	Check  Check
	Own    Own
}

// Run says where statements run.
type Run struct {
	// Reader runs the statements that only read, Writer those that change one thing; both
	// default to DB.
	Reader, Writer Querier
	// Write, when set, runs every change instead of Writer and DB (SQLite's single writer); tx
	// asks that run's statements commit together.
	Write func(ctx context.Context, tx bool, run func(ctx context.Context, q Querier) error) error
	// TxOptions are those of the transactions begun on DB.
	TxOptions *sql.TxOptions
	// BatchTx runs every batch call in one transaction, even of one statement.
	BatchTx bool
}

// Binding is how values are sent and read.
type Binding struct {
	// Style is how statements take their parameters.
	Style Style
	// BinaryText sends string columns' values as []byte (MariaDB's binary strings) rather than
	// as strings.
	BinaryText bool
	// Times is how times are sent and read.
	Times TimeFormat
	// LastTime, when set, is sent for any later time (SQL Server's datetime2 ends in 9999).
	LastTime time.Time
	// IDArgs binds the ids of PeekIn, RemoveIn, ReleaseIn, UnparkIn and DeleteParkedIn; nil binds
	// each as a string column's value.
	IDArgs func(ids []string) []any
	// MaxIn bounds the ids of one of those statements; 0 for no bound.
	MaxIn int
	// RowCount says the changing statements return their count as a row (SELECT @@ROWCOUNT)
	// rather than as rows affected.
	RowCount bool
}

// Errors classify the database's errors.
type Errors struct {
	// IsDuplicate says Store met the primary key: the timeout is stored already.
	IsDuplicate func(error) bool
	// Retry says a batch or Schedule transaction that failed with err may run again.
	Retry func(err error) bool
}

// Locks are the locks a store takes beyond its rows'.
type Locks struct {
	// Hold takes instance, a valid instance name, on this store's table for the caller until
	// release is called; held is false, and release nil, when another holder has it.
	// HoldOnConn makes one from a server's session lock.
	Hold func(ctx context.Context, instance string) (release func() error, held bool, err error)
	// KeyTx, when set, runs the transaction of a Schedule with a key, holding a lock on the key
	// around it, for a database that has no lock that ends with a transaction (Queries.KeyLock).
	KeyTx func(ctx context.Context, key string, run func(ctx context.Context, q Querier) error) error
}

// Check is what the columns accept.
type Check struct {
	// Validate checks what the columns require of a timeout beyond Timeout.Validate.
	Validate func(persistence.Timeout) error
	// Storable, when set, says whether a key (id, owner) could be stored: one that could not is
	// looked up in no statement, where the database might take it for another.
	Storable func(string) bool
}

// Own are the calls a backend runs its own way rather than with a statement of Queries.
type Own struct {
	// StoreRows inserts rows (sorted by id, no id twice) that are not stored yet and returns
	// their ids; MaxStoreRows bounds the rows of one call, 0 for no bound. Nil runs Store for
	// each row.
	StoreRows    func(ctx context.Context, q Querier, rows []Row) ([]string, error)
	MaxStoreRows int
	// RemoveIDs, when set, replaces RemoveIn: it deletes the rows of ids (sorted) and returns
	// the ids it deleted.
	RemoveIDs func(ctx context.Context, q Querier, ids []string) ([]string, error)
	// Claim and Hide, when set, replace the statements of the same names; they need not sort
	// what they return.
	Claim func(ctx context.Context, p ClaimParams) ([]Claimed, error)
	Hide  func(ctx context.Context, p HideParams) ([]persistence.Timeout, error)
	// Stats, when set, replaces the Stats and StatsByDestination statements; now is whole
	// microseconds, in UTC.
	Stats func(ctx context.Context, now time.Time) (persistence.Stats, error)
}

// ListSQL is how List's statement is made: SELECT, the columns and table of From, the filters
// set (each compares one of the columns named here with a parameter), ORDER BY due, id, and the
// limit (LIMIT, or TOP when Top).
type ListSQL struct {
	// From lists id, destination, due, owner, metadata, failure_count, key (empty for none),
	// parking reason (empty for none) and names the table: "id, ... FROM t".
	From string
	// The columns the filters and the order compare; Parked is the parking reason's, NULL for a
	// timeout that is not parked.
	ID, Due, Owner, Destination, Key, Parked string
	// Top limits with SELECT TOP (n) (SQL Server) rather than LIMIT n.
	Top bool
	// TimeParam, when set, wraps a time parameter as the due column compares it.
	TimeParam func(param string) string
}

// Row is a timeout of a StoreMany with its columns as they are stored.
type Row struct {
	T persistence.Timeout
	// Due is T.Due rounded up to the microsecond, in UTC.
	Due time.Time
	// Payload is T.Payload, empty rather than nil; Metadata is T.Metadata encoded.
	Payload, Metadata []byte
}

// Claimed is a claimed timeout's id and due time.
type Claimed struct {
	ID  string
	Due time.Time
}
