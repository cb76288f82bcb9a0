// Package sqlstore is the one implementation of persistence.Store, Inspector, Handover and the
// batch calls that the SQL backends share. A backend describes its database in a Dialect (its
// SQL, how it binds and reads values, what it runs differently) and wraps the Store this package
// makes in its own exported type. Statements are written with named parameters (@name) and
// compiled for each database at New.
package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Querier runs statements: a *sql.DB, a *sql.Tx, or a backend's wrapper of one.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
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
	// IDs is how PeekIn, RemoveIn, ReleaseIn, UnparkIn and DeleteParkedIn take their ids; PadIn
	// binds a list of n ids as one of InSize(n), so that a few statements, which the backend may
	// prepare, serve every batch; MaxIn bounds the ids of one statement, 0 for no bound.
	IDs   IDList
	PadIn bool
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
