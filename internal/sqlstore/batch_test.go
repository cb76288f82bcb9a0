package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// execCall is a statement a fakeWriter ran.
type execCall struct {
	query string
	args  []any
}

// fakeWriter runs changes without a database: it records them and answers each with the rows
// affected that affected gives (or its error).
type fakeWriter struct {
	calls    []execCall
	affected func(args []any) (int64, error)
}

func (f *fakeWriter) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	f.calls = append(f.calls, execCall{query, args})
	n, err := f.affected(args)
	if err != nil {
		return nil, err
	}
	return driver.RowsAffected(n), nil
}

func (f *fakeWriter) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errors.New("the fake runs no queries")
}

// fakeStore is a store on SQLite's statements and binding whose changes f runs.
func fakeStore(t *testing.T, f *fakeWriter, change func(d *Dialect)) *Store {
	t.Helper()
	d := Dialect{
		Name: "test",
		SQL:  Standard(`"t"`, Positional),
		Bind: Binding{Style: Positional, Times: TimeUnixMicro},
		Run:  Run{Writer: f},
	}
	if change != nil {
		change(&d)
	}
	s, err := New(d)
	require.NoError(t, err)
	return s
}

// TestStoreManyByDefaultStoresEachRow: without a StoreRows of the dialect's, StoreMany runs Store
// for each row, in id order, each id once, and returns the ids the database inserted.
func TestStoreManyByDefaultStoresEachRow(t *testing.T) {
	t.Parallel()
	f := &fakeWriter{affected: func(args []any) (int64, error) {
		if args[0] == "b" {
			return 0, nil // stored already
		}
		return 1, nil
	}}
	s := fakeStore(t, f, nil)
	due := time.Date(2030, 1, 2, 3, 4, 5, 6001, time.UTC)
	inserted, err := s.StoreMany(t.Context(), []persistence.Timeout{
		{ID: "c", Destination: "d", Due: due},
		{ID: "a", Destination: "d", Due: due, Owner: "o", Payload: []byte("p"), FailureCount: 2},
		{ID: "b", Destination: "d", Due: due},
		{ID: "a", Destination: "d", Due: due},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, inserted)
	require.Len(t, f.calls, 3)
	us := due.Truncate(time.Microsecond).Add(time.Microsecond).UnixMicro() // rounded up
	require.Equal(t, []any{"a", "d", us, us, "o", []byte("p"), persistence.EncodeMetadata(nil), int64(2)}, f.calls[0].args)
	require.Equal(t, StatementsOf(s).Store.SQL, f.calls[0].query)
	require.Equal(t, []byte{}, f.calls[1].args[5], "a nil payload is stored empty")
	require.Equal(t, "c", f.calls[2].args[0])
}

// TestKeysAndMaxIn: the ids a batch sends are those that could be stored, sorted, each once, in
// statements of at most MaxIn ids.
func TestKeysAndMaxIn(t *testing.T) {
	t.Parallel()
	s := fakeStore(t, &fakeWriter{}, func(d *Dialect) {
		d.Check.Storable = func(id string) bool { return id != "bad" }
		d.Bind.MaxIn = 2
	})
	require.Equal(t, []string{"a", "b"}, s.keys([]string{"b", "bad", "a", "b"}))
	require.Equal(t, 2, s.maxIn(5))
	require.Equal(t, 5, fakeStore(t, &fakeWriter{}, nil).maxIn(5))
	require.Equal(t, 1, fakeStore(t, &fakeWriter{}, nil).maxIn(0))
}
