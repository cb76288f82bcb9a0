package sqlserver

import (
	"context"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// These tests run the store against the fake driver in fakedb_test.go: what it sends, and how it
// reads what comes back, without a server.

// ordersEndpoint names the endpoint of the default names.
const ordersEndpoint = "orders"

// fakeAnswer answers each statement of q with a plausible row, as wide as the statement's result.
func fakeAnswer(q queries, due time.Time) func(c call) answer {
	return func(c call) answer {
		switch c.query {
		case q.installed:
			return rowsOf([]driver.Value{int64(5)})
		case q.store, q.delete, q.incrementFailureCount, q.cancelByOwner, q.releaseMany(2), q.dropKey, q.schedule, q.reschedule,
			q.park, q.releaseClaimsOf, q.unparkMany(2), q.deleteParkedMany(2):
			return rowsOf([]driver.Value{int64(1)})
		case holdInstance: // granted
			return rowsOf([]driver.Value{int64(0)})
		case q.keyHolder: // a claimed holder, which gives its key up
			return rowsOf([]driver.Value{"h", due, due.Add(time.Hour)})
		case q.statsByDestination:
			return rowsOf([]driver.Value{"orders", int64(1)})
		case q.next, q.now:
			return rowsOf([]driver.Value{due})
		case q.claim:
			return rowsOf([]driver.Value{"a", due})
		case q.peek:
			return rowsOf([]driver.Value{"orders", due, "", []byte("p"), persistence.EncodeMetadata(nil), int64(0), "", ""})
		case q.stats:
			return rowsOf([]driver.Value{int64(1), int64(1), nil, int64(0), due, due})
		case listStatement(q, persistence.ListOptions{}), listStatement(q, allFilters()):
			return rowsOf([]driver.Value{"a", "orders", due, "o", persistence.EncodeMetadata(nil), int64(0), "k", ""})
		case q.storeMany(2), q.removeMany(2):
			return rowsOf([]driver.Value{"a"}, []driver.Value{"b"})
		case q.peekMany(2):
			return rowsOf([]driver.Value{"a", "orders", due, "o", []byte("p"), persistence.EncodeMetadata(nil), int64(0), "", "parked"})
		}
		return answer{}
	}
}

// exercise calls every method of the store once.
func exercise(t *testing.T, store *Store, due time.Time) {
	t.Helper()
	ctx := t.Context()
	_, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "orders", Due: due, Owner: "o", Payload: []byte("p")})
	require.NoError(t, err)
	_, _, err = store.Next(ctx)
	require.NoError(t, err)
	now, err := store.Now(ctx)
	require.NoError(t, err)
	require.Equal(t, due, now)
	_, err = store.ClaimDue(ctx, due, 10, time.Minute)
	require.NoError(t, err)
	_, err = store.Peek(ctx, "a")
	require.NoError(t, err)
	_, err = store.IncrementFailureCount(ctx, "a")
	require.NoError(t, err)
	_, err = store.Remove(ctx, "a")
	require.NoError(t, err)
	_, err = store.Cancel(ctx, "a")
	require.NoError(t, err)
	_, err = store.CancelByOwner(ctx, "o")
	require.NoError(t, err)
	_, err = store.Stats(ctx, due)
	require.NoError(t, err)
	_, err = store.List(ctx, persistence.ListOptions{})
	require.NoError(t, err)
	_, err = store.List(ctx, allFilters())
	require.NoError(t, err)
	keyed := persistence.Timeout{ID: "k", Destination: "orders", Due: due, Key: "key"}
	_, err = store.Schedule(ctx, keyed, due, persistence.KeyReplace)
	require.NoError(t, err)
	_, err = store.Reschedule(ctx, "a", due, due)
	require.NoError(t, err)
	tx, err := store.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	keyed.ID = "k-tx"
	_, err = store.ScheduleTx(ctx, tx, keyed, due, persistence.KeyKeep)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	_, err = store.StoreMany(ctx, []persistence.Timeout{
		{ID: "a", Destination: "orders", Due: due, Owner: "o", Payload: []byte("p")},
		{ID: "b", Destination: "orders", Due: due},
	})
	require.NoError(t, err)
	_, err = store.PeekMany(ctx, []string{"a", "b"})
	require.NoError(t, err)
	_, err = store.RemoveMany(ctx, []string{"a", "b"})
	require.NoError(t, err)
	_, err = store.Park(ctx, "a", "reason")
	require.NoError(t, err)
	_, err = store.Unpark(ctx, []string{"a", "b"})
	require.NoError(t, err)
	_, err = store.DeleteParked(ctx, []string{"a", "b"})
	require.NoError(t, err)
	_, err = store.ClaimDueAs(ctx, "instance-1", due, 10, time.Minute)
	require.NoError(t, err)
	_, err = store.ReleaseClaimsOf(ctx, "instance-1")
	require.NoError(t, err)
	release, err := store.HoldInstance(ctx, "instance-1")
	require.NoError(t, err)
	require.NoError(t, release())
	_, err = store.Release(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.NoError(t, store.SetupInfrastructure(ctx))
}

// TestEveryStatementGetsItsParameters runs every method and checks each statement the store
// sent: it is one of the store's statements, its parameters are bound by name, once each, and
// they are exactly the @names the statement uses, so that a name misspelt on either side fails
// here rather than on a server ("Must declare the scalar variable").
func TestEveryStatementGetsItsParameters(t *testing.T) {
	t.Parallel()
	for name, config := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			due := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
			q := queriesFor(t, config)
			store, fake := newFakeStore(t, config, fakeAnswer(q, due))
			exercise(t, store, due)

			config.setDefaults()
			cols, err := tableColumns(q.setupTable)
			require.NoError(t, err)
			columnNames := make([]string, len(cols))
			for i, c := range cols {
				columnNames[i] = c.name
			}
			sent := map[string]bool{}
			for _, c := range fake.recorded() {
				known := slices.ContainsFunc(statements(q), func(st namedSQL) bool { return st.sql == c.query })
				require.True(t, known, "the store sent a statement that is not in queries:\n%s", c.query)
				sent[c.query] = true

				names := slices.Clone(c.names)
				slices.Sort(names)
				require.NotContains(t, names, "", "a positional parameter in:\n%s", c.query)
				require.Equal(t, slices.Compact(slices.Clone(names)), names, "a parameter bound twice in:\n%s", c.query)
				used, err := checkStatement(c.query, config.Schema, config.Table, columnNames)
				require.NoError(t, err)
				if len(names) == 0 {
					names = nil
				}
				require.Equal(t, used, names, "parameters used and bound differ in:\n%s", c.query)
			}
			// The default answer to installed says all is there: set up again to see the rest.
			fake.respond = func(c call) answer {
				if c.query == q.installed {
					return rowsOf([]driver.Value{int64(0)})
				}
				return answer{}
			}
			require.NoError(t, store.SetupInfrastructure(t.Context()))
			for _, c := range fake.recorded() {
				sent[c.query] = true
			}
			for _, st := range statements(q) {
				require.True(t, sent[st.sql], "statement %s was never sent", st.name)
			}
		})
	}
}

func TestStoreSends(t *testing.T) {
	t.Parallel()
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer { return rowsOf([]driver.Value{int64(1)}) })
	zone := time.FixedZone("UTC+05:30", 5*3600+30*60)
	due := time.Date(2031, 4, 5, 11, 37, 8, 123456001, zone) // 06:07:08.123456001 UTC
	inserted, err := store.Store(t.Context(), persistence.Timeout{
		ID: "id-ü", Destination: "orders", Due: due, Owner: "order-1",
		Metadata: map[string]string{"k": "v"}, FailureCount: 2,
	})
	require.NoError(t, err)
	require.True(t, inserted)

	calls := fake.recorded()
	require.Len(t, calls, 1)
	args := calls[0].args
	require.Equal(t, "id-ü", args["id"])
	require.Equal(t, "orders", args["destination"])
	require.Equal(t, "order-1", args["owner"])
	require.Equal(t, []byte{}, args["state"], "a nil payload is kept as an empty one")
	require.Equal(t, persistence.EncodeMetadata(map[string]string{"k": "v"}), args["headers"])
	require.Equal(t, int64(2), args["failureCount"])
	// In UTC, rounded up to the microsecond: go-mssqldb sends it as a datetimeoffset at +00:00,
	// whatever the DSN's timezone.
	sent := args["due"].(time.Time)
	require.Equal(t, time.UTC, sent.Location())
	require.Equal(t, time.Date(2031, 4, 5, 6, 7, 8, 123457000, time.UTC), sent)
}

// TestStoreReadsDuplicateKeyAsStoredAlready: two Stores of one new id at once pass NOT EXISTS
// together, and the second meets the primary key.
func TestStoreReadsDuplicateKeyAsStoredAlready(t *testing.T) {
	t.Parallel()
	timeout := persistence.Timeout{ID: "a", Destination: "orders", Due: time.Now()}
	for name, tc := range map[string]struct {
		answer   answer
		inserted bool
		fails    bool
	}{
		"inserted":                     {answer: rowsOf([]driver.Value{int64(1)}), inserted: true},
		"stored already":               {answer: rowsOf([]driver.Value{int64(0)})},
		"primary key (2627)":           {answer: answer{err: mssql.Error{Number: 2627, Message: "Violation of PRIMARY KEY constraint"}}},
		"unique index (2601)":          {answer: answer{err: mssql.Error{Number: 2601, Message: "Cannot insert duplicate key row"}}},
		"2627 among several":           {answer: answer{err: mssql.Error{Number: 3621, All: []mssql.Error{{Number: 2627}, {Number: 3621}}}}},
		"another server error":         {answer: answer{err: mssql.Error{Number: 1205, Message: "deadlock victim"}}, fails: true},
		"not a server error":           {answer: answer{err: errors.New("connection reset")}, fails: true},
		"a row count the store misses": {answer: answer{}, fails: true},
	} {
		store, _ := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(call) answer { return tc.answer })
		inserted, err := store.Store(t.Context(), timeout)
		require.Equal(t, tc.inserted, inserted, name)
		if tc.fails {
			require.Error(t, err, name)
			require.ErrorContains(t, err, `sqlserver: store "a": `, name)
			if se := (mssql.Error{}); errors.As(tc.answer.err, &se) {
				require.ErrorAs(t, err, &se, name)
			} else if tc.answer.err != nil {
				require.ErrorIs(t, err, tc.answer.err, name)
			}
		} else {
			require.NoError(t, err, name)
		}
	}
	var se mssql.Error
	store, _ := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(call) answer { return answer{err: mssql.Error{Number: 1205}} })
	_, err := store.Store(t.Context(), timeout)
	require.ErrorAs(t, err, &se, "the driver's error stays reachable")
	require.Equal(t, int32(1205), se.Number)
}

// TestStoreRefusesWhatColumnsCannotHold: refused before anything is sent, with
// persistence.ErrInvalidTimeout.
func TestStoreRefusesWhatColumnsCannotHold(t *testing.T) {
	t.Parallel()
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(call) answer { return rowsOf([]driver.Value{int64(1)}) })
	now := time.Now()
	rocket := "🚀" // two UTF-16 code units
	refused := map[string]persistence.Timeout{
		"persistence's own checks":   {ID: "", Destination: "d", Due: now},
		"id not UTF-8":               {ID: "bad\xff", Destination: "d", Due: now},
		"destination not UTF-8":      {ID: "a", Destination: "bad\xff", Due: now},
		"owner not UTF-8":            {ID: "a", Destination: "d", Owner: "bad\xff", Due: now},
		"destination of 251":         {ID: "a", Destination: strings.Repeat("d", 251), Due: now},
		"destination of 252 (emoji)": {ID: "a", Destination: strings.Repeat(rocket, 126), Due: now},
		"owner of 251":               {ID: "a", Destination: "d", Owner: strings.Repeat("é", 251), Due: now},
		"id ending in a space":       {ID: "a ", Destination: "d", Due: now},
		"owner ending in a space":    {ID: "a", Destination: "d", Owner: "o ", Due: now},
		"year 10000":                 {ID: "a", Destination: "d", Due: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"rounds up to 10000":         {ID: "a", Destination: "d", Due: time.Date(9999, 12, 31, 23, 59, 59, 999999001, time.UTC)},
		"year 0 in UTC":              {ID: "a", Destination: "d", Due: time.Date(1, 1, 1, 3, 0, 0, 0, time.FixedZone("+04", 4*3600))},
	}
	for name, to := range refused {
		inserted, err := store.Store(t.Context(), to)
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout, name)
		require.False(t, inserted, name)
	}
	require.Empty(t, fake.recorded(), "nothing refused reaches the server")

	accepted := map[string]persistence.Timeout{
		"destination of 250 (emoji)":    {ID: "a", Destination: strings.Repeat(rocket, 125), Due: now},
		"owner of 250 two-byte runes":   {ID: "a", Destination: "d", Owner: strings.Repeat("é", 250), Due: now},
		"id of 250 bytes":               {ID: strings.Repeat("i", persistence.MaxIDLength), Destination: "d", Due: now},
		"destination ending in a space": {ID: "a", Destination: "d ", Due: now},
		"NUL in id and owner":           {ID: "a\x00b", Destination: "d", Owner: "o\x00", Due: now},
		"last microsecond of 9999":      {ID: "a", Destination: "d", Due: time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
	}
	for name, to := range accepted {
		_, err := store.Store(t.Context(), to)
		require.NoError(t, err, name)
	}
}

// TestClaimDue: what a claim sends, and the order it returns ids in whatever order OUTPUT gives
// them and whatever zone the driver reads times in.
func TestClaimDue(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	// go-mssqldb reads a datetimeoffset as an instant in a zone of its offset.
	zone := time.FixedZone("", 0)
	at := func(sec int) time.Time { return time.Date(2030, 1, 1, 0, 0, sec, 0, zone) }
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		return rowsOf(
			[]driver.Value{"late", at(30)},
			[]driver.Value{"b-tie", at(10)},
			[]driver.Value{"early", at(5)},
			[]driver.Value{"a-tie", at(10)},
		)
	})
	now := time.Date(2030, 1, 1, 9, 0, 0, 999, time.FixedZone("+09", 9*3600))
	ids, err := store.ClaimDue(t.Context(), now, 25, 90*time.Second)
	require.NoError(t, err)
	require.Equal(t, []string{"early", "a-tie", "b-tie", "late"}, ids, "earliest due first, then by id")

	calls := fake.recorded()
	require.Len(t, calls, 1)
	require.Equal(t, q.claim, calls[0].query)
	require.Equal(t, int64(25), calls[0].args["limit"])
	midnight := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, midnight, calls[0].args["now"], "now in UTC, cut to the microsecond")
	require.Equal(t, midnight.Add(90*time.Second), calls[0].args["until"])

	// Nothing is sent for an empty claim, and a negative lease is refused.
	ids, err = store.ClaimDue(t.Context(), now, 0, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids)
	_, err = store.ClaimDue(t.Context(), now, 10, -time.Second)
	require.ErrorContains(t, err, "lease cannot be negative")
	require.Len(t, fake.recorded(), 1)

	// A lease past datetime2's end is sent as its end.
	_, err = store.ClaimDue(t.Context(), time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC), 10, 2*time.Hour)
	require.NoError(t, err)
	require.Equal(t, maxDateTime2(), fake.recorded()[1].args["until"])
}

func TestPeek(t *testing.T) {
	t.Parallel()
	zone := time.FixedZone("UTC-3", -3*3600)
	md := map[string]string{"k": "v", "nul": "a\x00b"}
	store, _ := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		switch c.args["id"] {
		case "a":
			return rowsOf([]driver.Value{"orders", time.Date(2030, 1, 1, 12, 0, 0, 1000, zone), "o", []byte("p"), persistence.EncodeMetadata(md), int64(4), "k", "too big"})
		case "null-state":
			return rowsOf([]driver.Value{"orders", time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC), "", nil, persistence.EncodeMetadata(nil), int64(0), "", ""})
		case "corrupt":
			return rowsOf([]driver.Value{"orders", time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC), "", nil, []byte{9, 9}, int64(0), "", ""})
		}
		return answer{}
	})
	ctx := t.Context()
	got, err := store.Peek(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, persistence.Timeout{
		ID: "a", Destination: "orders", Owner: "o", Payload: []byte("p"), Metadata: md, FailureCount: 4, Key: "k", Parked: "too big",
		Due: time.Date(2030, 1, 1, 15, 0, 0, 1000, time.UTC),
	}, got, "the instant read, in UTC")

	got, err = store.Peek(ctx, "null-state")
	require.NoError(t, err)
	require.Empty(t, got.Payload, "a NULL State, as the seed's schema allows, is an empty payload")

	_, err = store.Peek(ctx, "missing")
	require.ErrorIs(t, err, persistence.ErrNotFound)
	_, err = store.Peek(ctx, "corrupt")
	require.ErrorIs(t, err, persistence.ErrCorruptMetadata)
	require.ErrorContains(t, err, `sqlserver: peek "corrupt"`)
}

func TestNextAndStats(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	tokyo := time.FixedZone("+09", 9*3600)
	empty := true
	store, _ := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		switch {
		case c.query == q.next && empty:
			return rowsOf([]driver.Value{nil})
		case c.query == q.next:
			return rowsOf([]driver.Value{time.Date(2030, 1, 1, 9, 0, 0, 0, tokyo)})
		case c.query == q.stats && empty:
			return rowsOf([]driver.Value{int64(0), nil, nil, nil, nil, nil})
		case c.query == q.stats:
			return rowsOf([]driver.Value{int64(2), int64(1), int64(0), int64(1), time.Date(2030, 1, 1, 9, 0, 0, 0, tokyo), time.Date(2031, 1, 1, 9, 0, 0, 0, tokyo)})
		case c.query == q.statsByDestination && !empty:
			return rowsOf([]driver.Value{"orders", int64(2)})
		}
		return answer{}
	})
	ctx := t.Context()
	_, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.False(t, ok, "MIN of no rows is NULL: nothing stored")
	now := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	stats, err := store.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, persistence.Stats{ByDestination: map[string]int{}}, stats, "SUM of no rows is NULL: none")

	empty = false
	next, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), next)
	stats, err = store.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, persistence.Stats{
		Pending:       2,
		DueNow:        1,
		Parked:        1,
		Earliest:      time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		Latest:        time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC),
		ByDestination: map[string]int{"orders": 2},
	}, stats)
}

func TestCounts(t *testing.T) {
	t.Parallel()
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		if c.args["id"] == "present" || c.args["owner"] == "owner" {
			return rowsOf([]driver.Value{int64(1)})
		}
		return rowsOf([]driver.Value{int64(0)})
	})
	ctx := t.Context()
	for name, f := range map[string]func(ctx context.Context, id string) (bool, error){
		"Remove": store.Remove, "Cancel": store.Cancel, "IncrementFailureCount": store.IncrementFailureCount,
	} {
		ok, err := f(ctx, "present")
		require.NoError(t, err, name)
		require.True(t, ok, name)
		ok, err = f(ctx, "missing")
		require.NoError(t, err, name)
		require.False(t, ok, name)
	}
	n, err := store.CancelByOwner(ctx, "owner")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	before := len(fake.recorded())
	n, err = store.CancelByOwner(ctx, "")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, fake.recorded(), before, "an empty owner sends nothing")
}

// TestUnstorableKeysFindNothing: an id or owner Store would refuse is looked up in no query,
// where SQL Server would find another timeout: the driver sends invalid UTF-8 as U+FFFD, and
// "a " compares equal to "a".
func TestUnstorableKeysFindNothing(t *testing.T) {
	t.Parallel()
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(call) answer {
		return rowsOf([]driver.Value{int64(1)}) // were a query sent, it would find a row
	})
	ctx := t.Context()
	for _, key := range []string{"a ", "a\xff", "\xff"} {
		_, err := store.Peek(ctx, key)
		require.ErrorIs(t, err, persistence.ErrNotFound, "%q", key)
		for name, f := range map[string]func(ctx context.Context, id string) (bool, error){
			"Remove": store.Remove, "Cancel": store.Cancel, "IncrementFailureCount": store.IncrementFailureCount,
		} {
			ok, err := f(ctx, key)
			require.NoError(t, err, name)
			require.False(t, ok, "%s(%q)", name, key)
		}
		n, err := store.CancelByOwner(ctx, key)
		require.NoError(t, err)
		require.Zero(t, n)
		list, err := store.List(ctx, persistence.ListOptions{Owner: key})
		require.NoError(t, err)
		require.Empty(t, list)
	}
	require.Empty(t, fake.recorded())
}

func TestList(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, fakeAnswer(q, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
	ctx := t.Context()
	list, err := store.List(ctx, persistence.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Empty(t, list[0].Payload)
	require.Equal(t, "k", list[0].Key)
	filters := allFilters()
	_, err = store.List(ctx, filters)
	require.NoError(t, err)
	calls := fake.recorded()
	require.Equal(t, listStatement(q, persistence.ListOptions{}), calls[0].query)
	require.Equal(t, int64(100), calls[0].args["limit"], "ListOptions' default limit")
	require.Equal(t, listStatement(q, filters), calls[1].query)
	require.Equal(t, map[string]any{
		"limit": int64(7), "owner": "o", "destination": "orders", "key": "k",
		"dueFrom": filters.DueFrom, "dueBefore": filters.DueBefore, "afterDue": filters.After.Due, "afterID": "a",
	}, calls[1].args, "each filter bound once, times in UTC")
	require.Contains(t, calls[1].query, "Time >= CAST(@afterDue AS datetime2(7)) AND (Time > CAST(@afterDue AS datetime2(7)) OR Time = CAST(@afterDue AS datetime2(7)) AND Id > @afterID)",
		"the keyset after the cursor, in List's order")
	require.True(t, strings.HasPrefix(calls[1].query, "SELECT TOP (@limit) "))
}

// TestSetupInfrastructureLooksThenLocks: when the table and its three indexes are there it only
// looks; otherwise it takes the lock and runs the script's batches in one transaction.
func TestSetupInfrastructureLooksThenLocks(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	var indexes int64
	failOn := ""
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		switch c.query {
		case q.installed:
			return rowsOf([]driver.Value{indexes})
		case failOn:
			return answer{err: mssql.Error{Number: 262, Message: "CREATE TABLE permission denied in database 'app'."}}
		}
		return answer{}
	})
	ctx := t.Context()

	indexes = installedCount
	require.NoError(t, store.SetupInfrastructure(ctx))
	require.Len(t, fake.recorded(), 1, "only the look")
	require.Empty(t, fake.txEvents)

	indexes = 3 // a table an older version created: no key index, no parking reason
	require.NoError(t, store.SetupInfrastructure(ctx))
	var sent []string
	for _, c := range fake.recorded()[2:] { // after the two looks
		require.True(t, c.inTx, "in the transaction:\n%s", c.query)
		sent = append(sent, c.query)
	}
	require.Equal(t, []string{q.lockSetup, q.setupSchema, q.setupTable, q.addKey, q.keyIndex, q.addParked, q.claimedByIndex}, sent,
		"lock, then the script's batches")
	require.Equal(t, []string{"begin", "commit"}, fake.txEvents)

	failOn = q.setupTable
	err := store.SetupInfrastructure(ctx)
	require.ErrorContains(t, err, "sqlserver: set up [dbo].[orders.timeouts]: ")
	require.ErrorContains(t, err, "permission denied")
	require.Equal(t, []string{"begin", "commit", "begin", "rollback"}, fake.txEvents)
}

func TestErrorsNameTheOperation(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection reset by peer")
	store, _ := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(call) answer { return answer{err: cause} })
	ctx := t.Context()
	checks := map[string]error{}
	_, _, checks["sqlserver: next: "] = store.Next(ctx)
	_, checks["sqlserver: claim: "] = store.ClaimDue(ctx, time.Now(), 1, time.Minute)
	_, checks[`sqlserver: peek "a": `] = store.Peek(ctx, "a")
	_, checks[`sqlserver: remove "a": `] = store.Remove(ctx, "a")
	_, checks[`sqlserver: cancel "a": `] = store.Cancel(ctx, "a")
	_, checks[`sqlserver: increment failure count of "a": `] = store.IncrementFailureCount(ctx, "a")
	_, checks[`sqlserver: cancel timeouts of "o": `] = store.CancelByOwner(ctx, "o")
	_, checks["sqlserver: stats: "] = store.Stats(ctx, time.Now())
	_, checks[`sqlserver: schedule "a": `] = store.Schedule(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: time.Now(), Key: "k"}, time.Now(), persistence.KeyKeep)
	_, checks[`sqlserver: reschedule "a": `] = store.Reschedule(ctx, "a", time.Now(), time.Now())
	_, checks["sqlserver: list: "] = store.List(ctx, persistence.ListOptions{})
	checks["sqlserver: set up [dbo].[orders.timeouts]: "] = store.SetupInfrastructure(ctx)
	for prefix, err := range checks {
		require.ErrorIs(t, err, cause, prefix)
		require.True(t, strings.HasPrefix(err.Error(), prefix), "%q should start with %q", err, prefix)
	}
}

// TestHoldInstance: sp_getapplock's result decides: granted (0), held by another session (-1,
// an error wrapping persistence.ErrInstanceInUse naming the instance), or failed (below -1).
// The resource is the same for one table and instance, and differs for another instance.
func TestHoldInstance(t *testing.T) {
	t.Parallel()
	var (
		result    int64
		resources []string
	)
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		switch c.query {
		case holdInstance:
			resources = append(resources, c.args["resource"].(string))
			return rowsOf([]driver.Value{result})
		case releaseInstance:
			return answer{}
		}
		t.Errorf("unexpected statement:\n%s", c.query)
		return answer{}
	})
	ctx := t.Context()
	release, err := store.HoldInstance(ctx, "orders-1")
	require.NoError(t, err)
	require.NoError(t, release())
	var released bool
	for _, c := range fake.recorded() {
		released = released || c.query == releaseInstance
	}
	require.True(t, released, "release gives the application lock back")

	result = -1
	_, err = store.HoldInstance(ctx, "orders-1")
	require.ErrorIs(t, err, persistence.ErrInstanceInUse)
	require.ErrorContains(t, err, `sqlserver: hold instance "orders-1"`)
	result = -999
	_, err = store.HoldInstance(ctx, "orders-2")
	require.ErrorContains(t, err, "sp_getapplock returned -999")
	require.NotErrorIs(t, err, persistence.ErrInstanceInUse)

	require.Len(t, resources, 3)
	require.Equal(t, resources[0], resources[1])
	require.NotEqual(t, resources[0], resources[2])
	require.LessOrEqual(t, len(resources[0]), 255, "sp_getapplock's limit")
}

// TestClaimDueAsSendsTheInstance: ClaimDueAs binds the instance as @by in the claim itself, and
// ClaimDue binds NULL.
func TestClaimDueAsSendsTheInstance(t *testing.T) {
	t.Parallel()
	due := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, fakeAnswer(q, due))
	_, err := store.ClaimDueAs(t.Context(), "orders-1", due, 10, time.Minute)
	require.NoError(t, err)
	_, err = store.ClaimDue(t.Context(), due, 10, time.Minute)
	require.NoError(t, err)
	calls := fake.recorded()
	require.Len(t, calls, 2, "one statement a claim")
	require.Equal(t, "orders-1", calls[0].args["by"])
	require.Contains(t, calls[1].args, "by")
	require.Nil(t, calls[1].args["by"])
}
