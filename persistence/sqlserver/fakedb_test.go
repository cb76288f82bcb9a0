package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"testing"
)

// A fake database/sql driver, in the manner of database/sql's own tests: no SQL Server runs
// here, so the store is run against a connection that records each statement with the
// parameters bound to it and answers as a test tells it. It shows what the Go side does (which
// statement, which parameters, of which types, how answers and errors are read); what the server
// would do with the statements is for the conformance suite against a real server.

// call is one statement the store ran.
type call struct {
	query string
	// args are the bound parameters by name; positional ones are kept under "" and fail the
	// checks, since the store binds every parameter by name.
	args  map[string]any
	names []string
	// inTx is set for statements run in a transaction.
	inTx bool
}

// answer is what the fake returns for a call: rows for a query, or an error.
type answer struct {
	columns []string
	rows    [][]driver.Value
	err     error
}

// fakeDB records calls and answers them with respond.
type fakeDB struct {
	t       *testing.T
	mu      sync.Mutex
	calls   []call
	respond func(c call) answer
	// txEvents records "begin", "commit" and "rollback".
	txEvents []string
}

// newFakeStore returns a store made by New on a *sql.DB whose connections are fake. respond
// answers each statement; nil answers every query with no rows.
func newFakeStore(t *testing.T, config Config, respond func(c call) answer) (*Store, *fakeDB) {
	t.Helper()
	fake := &fakeDB{t: t, respond: respond}
	if fake.respond == nil {
		fake.respond = func(call) answer { return answer{} }
	}
	db := sql.OpenDB(fakeConnector{fake})
	t.Cleanup(func() { _ = db.Close() })
	store, err := New(db, config)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return store, fake
}

// rowsOf answers with one row of values under generic column names.
func rowsOf(rows ...[]driver.Value) answer {
	a := answer{rows: rows}
	if len(rows) > 0 {
		for i := range rows[0] {
			a.columns = append(a.columns, "c"+string(rune('0'+i)))
		}
	}
	return a
}

// record keeps c and answers it. An answer whose rows are not as wide as the statement's result
// fails the test: the store would scan the wrong number of columns from a real server too.
func (f *fakeDB) record(c call) answer {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	a := f.respond(c)
	if len(a.rows) > 0 {
		cols, err := resultColumns(c.query)
		if err != nil {
			f.t.Errorf("result columns of %q: %v", c.query, err)
		}
		for _, row := range a.rows {
			if len(row) != len(cols) {
				f.t.Errorf("a row of %d values answers a statement whose result has %d columns %q:\n%s",
					len(row), len(cols), cols, c.query)
			}
		}
	}
	return a
}

func (f *fakeDB) recorded() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

type fakeConnector struct{ db *fakeDB }

func (c fakeConnector) Connect(context.Context) (driver.Conn, error) { return &fakeConn{db: c.db}, nil }
func (c fakeConnector) Driver() driver.Driver                        { return fakeDriver{} }

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("fake driver: open by connector only")
}

type fakeConn struct {
	db   *fakeDB
	inTx bool
}

var (
	_ driver.ConnBeginTx        = (*fakeConn)(nil)
	_ driver.ExecerContext      = (*fakeConn)(nil)
	_ driver.QueryerContext     = (*fakeConn)(nil)
	_ driver.NamedValueChecker  = (*fakeConn)(nil)
	_ driver.ConnPrepareContext = (*fakeConn)(nil)
)

func (c *fakeConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("fake driver: the store never prepares statements")
}

func (c *fakeConn) PrepareContext(context.Context, string) (driver.Stmt, error) {
	return c.Prepare("")
}

func (c *fakeConn) Close() error { return nil }

func (c *fakeConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *fakeConn) BeginTx(ctx context.Context, _ driver.TxOptions) (driver.Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.db.mu.Lock()
	c.db.txEvents = append(c.db.txEvents, "begin")
	c.db.mu.Unlock()
	c.inTx = true
	return fakeTx{c}, nil
}

// CheckNamedValue takes any value as go-mssqldb does (civil.DateTime, for one, is no
// driver.Value), so that the tests see what the store bound.
func (c *fakeConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (c *fakeConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a := c.db.record(c.call(query, args))
	if a.err != nil {
		return nil, a.err
	}
	return driver.RowsAffected(len(a.rows)), nil
}

func (c *fakeConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a := c.db.record(c.call(query, args))
	if a.err != nil {
		return nil, a.err
	}
	return &fakeRows{columns: a.columns, rows: a.rows}, nil
}

func (c *fakeConn) call(query string, args []driver.NamedValue) call {
	cl := call{query: query, args: map[string]any{}, inTx: c.inTx}
	for _, a := range args {
		cl.args[a.Name] = a.Value
		cl.names = append(cl.names, a.Name)
	}
	return cl
}

type fakeTx struct{ c *fakeConn }

func (tx fakeTx) Commit() error   { return tx.end("commit") }
func (tx fakeTx) Rollback() error { return tx.end("rollback") }

func (tx fakeTx) end(event string) error {
	tx.c.db.mu.Lock()
	tx.c.db.txEvents = append(tx.c.db.txEvents, event)
	tx.c.db.mu.Unlock()
	tx.c.inTx = false
	return nil
}

type fakeRows struct {
	columns []string
	rows    [][]driver.Value
}

func (r *fakeRows) Columns() []string { return r.columns }
func (r *fakeRows) Close() error      { return nil }

func (r *fakeRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}
