// Package sqlstore is the one implementation of persistence.Store, Inspector, Handover and the
// batch calls that the SQL backends share. A backend describes its database in a Dialect (its
// SQL, how it binds and reads values, what it runs differently) and wraps the Store this package
// makes in its own exported type.
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

// Queries is a backend's SQL. Each statement takes its parameters in the order its comment
// gives; a dialect that numbers them (Dialect.Numbered) gets a name given twice once, at its
// first place, and one that binds by name (Dialect.Named) gets them under those names.
type Queries struct {
	// Store inserts a timeout: id, destination, due, due (as available_at), owner, state
	// (payload), headers (metadata), failureCount.
	Store string
	// Next selects the earliest available_at, or NULL.
	Next string
	// Now selects the database's current time in UTC, read when the statement runs (not when a
	// transaction began); empty for a database on the caller's machine (SQLite), whose clock is
	// the caller's. See persistence.Clocked.
	Now string
	// Claim moves up to limit claimable rows to until, records by as their claiming instance
	// (NULL for none), and returns their id and due: until, now, limit, by.
	Claim string
	// Peek selects destination, due, owner, payload, metadata, failure_count, key (empty for
	// none), parking reason (empty for none): id.
	Peek string
	// Delete and IncrementFailureCount change one row: id.
	Delete, IncrementFailureCount string
	// CancelByOwner deletes the rows of a non-empty owner: owner.
	CancelByOwner string
	// Stats selects the count, how many are due at now and not parked, how many are claimed at
	// now and not parked, how many are parked (these three NULL for no rows), the earliest and
	// the latest due time: now, now.
	Stats string
	// StatsByDestination selects each destination and its count.
	StatsByDestination string
	// List is what List reads and the columns its filters compare (see ListSQL).
	List ListSQL
	// Exists selects a row when the id is stored, reading the latest committed row even in a
	// REPEATABLE READ transaction: id.
	Exists string
	// KeyLock, when set, takes a lock on the key until the transaction ends, so that Schedules
	// of one key queue for it rather than race for its row: key.
	KeyLock string
	// KeyHolder selects id, due, available_at of the row holding key and locks it until the
	// transaction ends: key.
	KeyHolder string
	// DropKey sets the key of one row to NULL: id.
	DropKey string
	// Schedule inserts a timeout as Store does, with its key (NULL for none) last, and inserts
	// nothing, without failing the transaction, when the id or the key is taken (or fails with
	// an error Dialect.IsDuplicate accepts): Store's parameters, then key.
	Schedule string
	// Reschedule moves the due time (and available_at) of one row pending at now and not
	// parked: due, due, id, now.
	Reschedule string
	// Survey selects per destination its count, latest due and hidden count, parked rows left
	// out: hiddenFrom, from.
	Survey string
	// Hide moves rows that are not parked to mark, records no claiming instance, and returns
	// them whole: mark, from, from, now, hiddenFrom, mark, limit.
	Hide string
	// Park sets one row aside: available_at to parkedAt (persistence.MaxDue), the reason, no
	// claiming instance and no key: parkedAt, reason, id.
	Park string
	// ReleaseClaimsOf moves the rows instance holds claimed (not parked, not hidden) back to
	// their due time, with no claiming instance: instance, hiddenFrom.
	ReleaseClaimsOf string
	// PeekIn (id and the columns of Peek), RemoveIn (returning the ids deleted), ReleaseIn
	// (available_at back to due and no claiming instance, parked rows left alone) and UnparkIn
	// (parked rows back to due, failure count 0, no reason) and DeleteParkedIn (parked rows
	// deleted; a count, as UnparkIn) are made for n ids, bound by Dialect.IDArgs.
	PeekIn, RemoveIn, ReleaseIn, UnparkIn, DeleteParkedIn func(n int) string
}

// Parameter names of the statements, for dialects that bind by name.
var (
	storeParams  = []string{"id", "destination", "due", "due", "owner", "state", "headers", "failureCount"}
	claimParams  = []string{"until", "now", "limit", "by"}
	idParams     = []string{"id"}
	ownerParams  = []string{"owner"}
	keyParams    = []string{"key"}
	statsParams  = []string{"now", "now"}
	schedParams  = []string{"id", "destination", "due", "due", "owner", "state", "headers", "failureCount", "key"}
	reschParams  = []string{"due", "due", "id", "now"}
	surveyParams = []string{"hiddenFrom", "from"}
	hideParams   = []string{"mark", "from", "from", "now", "hiddenFrom", "mark", "limit"}
	parkParams   = []string{"parkedAt", "reason", "id"}
	heldParams   = []string{"instance", "hiddenFrom"}
)

// Dialect is what a backend tells the core about its database and its store. Only Name, DB,
// Queries, Time, ReadTime and Hold are required.
type Dialect struct {
	// Name starts every error the store returns ("postgres").
	Name string
	// DB is the pool transactions begin on.
	DB *sql.DB
	// Reader runs the statements that only read, Writer those that change one thing; both
	// default to DB.
	Reader, Writer Querier
	// Write, when set, runs every change instead of Writer and DB (SQLite's single writer); tx
	// asks that run's statements commit together.
	Write func(ctx context.Context, tx bool, run func(ctx context.Context, q Querier) error) error
	// TxOptions are those of the transactions begun on DB.
	TxOptions *sql.TxOptions
	// Close releases what the backend opened; Store.Close calls it once.
	Close func() error

	Queries Queries

	// Numbered binds parameters by number ($1), so that a statement may use one twice; Named
	// binds them by name (SQL Server's @id).
	Numbered, Named bool
	// Text binds a string column's value (id, destination, owner); nil binds the string.
	Text func(string) any
	// Time binds a time in UTC that is whole microseconds.
	Time func(time.Time) any
	// ReadTime reads a time column's value that is not NULL.
	ReadTime func(src any) (time.Time, error)
	// IDArgs binds the ids of PeekIn, RemoveIn and ReleaseIn; nil binds each as Text does.
	IDArgs func(ids []string) []any
	// MaxIn bounds the ids of one statement of PeekIn, RemoveIn and ReleaseIn; 0 for no bound.
	MaxIn int
	// RowCount says the changing statements return their count as a row (SELECT @@ROWCOUNT)
	// rather than as rows affected.
	RowCount bool

	// Validate checks what the columns require of a timeout beyond Timeout.Validate.
	Validate func(persistence.Timeout) error
	// Storable, when set, says whether a key (id, owner) could be stored: one that could not is
	// looked up in no statement, where the database might take it for another.
	Storable func(string) bool
	// IsDuplicate says Store met the primary key: the timeout is stored already.
	IsDuplicate func(error) bool
	// Retry says a batch or Schedule transaction that failed with err may run again.
	Retry func(err error) bool

	// BatchTx runs every batch call in one transaction, even of one statement.
	BatchTx bool
	// StoreRows inserts rows (sorted by id, no id twice) that are not stored yet and returns
	// their ids; MaxStoreRows bounds the rows of one call, 0 for no bound. Required for
	// StoreMany.
	StoreRows    func(ctx context.Context, q Querier, rows []Row) ([]string, error)
	MaxStoreRows int
	// RemoveIDs, when set, replaces RemoveIn: it deletes the rows of ids (sorted) and returns
	// the ids it deleted.
	RemoveIDs func(ctx context.Context, q Querier, ids []string) ([]string, error)
	// KeyTx, when set, runs the transaction of a Schedule with a key, holding a lock on the key
	// around it, for a database that has no lock that ends with a transaction (Queries.KeyLock).
	KeyTx func(ctx context.Context, key string, run func(ctx context.Context, q Querier) error) error
	// Claim and Hide, when set, replace the statements of the same names; they need not sort
	// what they return. Claim records by as the claiming instance, NULL when it is nil.
	Claim func(ctx context.Context, now, until time.Time, limit int, by any) ([]Claimed, error)
	Hide  func(ctx context.Context, now, from time.Time, limit int, mark time.Time) ([]persistence.Timeout, error)
	// Stats, when set, replaces the Stats and StatsByDestination statements (PostgreSQL's
	// counts, kept by the database as rows change); now is whole microseconds, in UTC.
	Stats func(ctx context.Context, now time.Time) (persistence.Stats, error)

	// Hold takes instance, a valid instance name, on this store's table for the caller until
	// release is called; held is false, and release nil, when another holder has it.
	// HoldOnConn makes one from a server's session lock.
	Hold func(ctx context.Context, instance string) (release func() error, held bool, err error)
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
