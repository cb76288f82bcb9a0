package sqlserver

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// idsAnswer answers a batch statement as if every id bound to it was inserted, found or deleted.
func idsAnswer(c call) answer {
	var rows [][]driver.Value
	for _, name := range c.names {
		if !strings.HasPrefix(name, "id") {
			continue
		}
		if strings.HasPrefix(c.query, "SELECT") { // PeekMany
			rows = append(rows, []driver.Value{c.args[name], "orders", time.Now(), "", []byte("p"), persistence.EncodeMetadata(nil), int64(0), "", ""})
		} else {
			rows = append(rows, []driver.Value{c.args[name]})
		}
	}
	return rowsOf(rows...)
}

func TestStoreManySends(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, idsAnswer)
	zone := time.FixedZone("UTC+05:30", 5*3600+30*60)
	due := time.Date(2031, 4, 5, 11, 37, 8, 123456001, zone) // 06:07:08.123456001 UTC
	inserted, err := store.StoreMany(t.Context(), []persistence.Timeout{
		{ID: "b", Destination: "billing", Due: due, Payload: []byte("pb")},
		{ID: "a-ü", Destination: "orders", Due: due, Owner: "order-1", Metadata: map[string]string{"k": "v"}, FailureCount: 2},
		{ID: "b", Destination: "again", Due: due},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a-ü", "b"}, inserted)

	calls := fake.recorded()
	require.Len(t, calls, 1, "one statement")
	require.False(t, calls[0].inTx, "one statement needs no transaction")
	require.Equal(t, q.storeMany(2), calls[0].query, "an id twice in the batch is sent once")
	args := calls[0].args
	// In id order, so that concurrent batches lock in one order.
	require.Equal(t, "a-ü", args["id0"])
	require.Equal(t, "orders", args["destination0"])
	require.Equal(t, "order-1", args["owner0"])
	require.Equal(t, []byte{}, args["state0"], "a nil payload is kept as an empty one")
	require.Equal(t, persistence.EncodeMetadata(map[string]string{"k": "v"}), args["headers0"])
	require.Equal(t, int64(2), args["failureCount0"])
	require.Equal(t, "b", args["id1"])
	require.Equal(t, "billing", args["destination1"], "the first of an id's timeouts")
	require.Equal(t, []byte("pb"), args["state1"])
	for _, name := range []string{"due0", "due1"} {
		sent := args[name].(time.Time)
		require.Equal(t, time.UTC, sent.Location())
		require.Equal(t, time.Date(2031, 4, 5, 6, 7, 8, 123457000, time.UTC), sent, "rounded up, as Store sends it")
	}
}

func TestStoreManyRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, idsAnswer)
	_, err := store.StoreMany(t.Context(), []persistence.Timeout{
		{ID: "a", Destination: "d", Due: time.Now()},
		{ID: "b ", Destination: "d", Due: time.Now()},
	})
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout)
	require.Empty(t, fake.recorded(), "none stored when one is invalid")
}

// TestStoreManyRunsAgainAfterThePrimaryKey: another caller stored one of the ids between NOT
// EXISTS and the insert; the statement was undone alone, and runs again.
func TestStoreManyRunsAgainAfterThePrimaryKey(t *testing.T) {
	t.Parallel()
	ts := []persistence.Timeout{{ID: "a", Destination: "d", Due: time.Now()}, {ID: "b", Destination: "d", Due: time.Now()}}
	runs := 0
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		runs++
		if runs == 1 {
			return answer{err: mssql.Error{Number: 2627, Message: "Violation of PRIMARY KEY constraint"}}
		}
		return rowsOf([]driver.Value{"b"}) // a was stored by the other caller
	})
	inserted, err := store.StoreMany(t.Context(), ts)
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, inserted)
	require.Len(t, fake.recorded(), 2)

	// It gives up, rather than looping, when the key keeps failing.
	store, fake = newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(call) answer {
		return answer{err: mssql.Error{Number: 2601, Message: "Cannot insert duplicate key row"}}
	})
	_, err = store.StoreMany(t.Context(), ts)
	require.ErrorContains(t, err, "sqlserver: store 2 timeouts: ")
	require.Len(t, fake.recorded(), 3, "one run more than the statement has rows")
}

// TestBatchesBeyondOneStatement: StoreMany and RemoveMany split what exceeds one statement's
// parameters and commit the statements together; PeekMany, which writes nothing, needs no
// transaction.
func TestBatchesBeyondOneStatement(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, idsAnswer)
	ctx := t.Context()
	var (
		ts  []persistence.Timeout
		ids []string
	)
	for i := range 600 {
		id := fmt.Sprintf("t-%03d", i)
		ids = append(ids, id)
		ts = append(ts, persistence.Timeout{ID: id, Destination: "d", Due: time.Now()})
	}
	inserted, err := store.StoreMany(ctx, ts)
	require.NoError(t, err)
	require.Equal(t, ids, inserted)
	calls := fake.recorded()
	require.Equal(t, []string{q.storeMany(250), q.storeMany(250), q.storeMany(100)},
		[]string{calls[0].query, calls[1].query, calls[2].query})
	for _, c := range calls {
		require.True(t, c.inTx)
		require.LessOrEqual(t, len(c.names), 2100, "SQL Server's limit of parameters")
	}
	require.Equal(t, []string{"begin", "commit"}, fake.txEvents)

	// RemoveMany leaves out ids no timeout can have, and ids asked twice.
	asked := append(append([]string{"bad\xff", "trailing "}, ids...), ids[:10]...)
	for i := range 500 {
		asked = append(asked, fmt.Sprintf("u-%03d", i))
	}
	removed, err := store.RemoveMany(ctx, asked)
	require.NoError(t, err)
	require.Len(t, removed, 1100)
	calls = fake.recorded()[3:]
	require.Equal(t, []string{q.removeMany(500), q.removeMany(500), q.removeMany(100)},
		[]string{calls[0].query, calls[1].query, calls[2].query})
	for _, c := range calls {
		require.True(t, c.inTx)
		for _, v := range c.args {
			require.True(t, storable(v.(string)), "%q sent", v)
		}
	}
	require.Equal(t, []string{"begin", "commit", "begin", "commit"}, fake.txEvents)

	found, err := store.PeekMany(ctx, append(append([]string{"bad\xff"}, ids...), ids...))
	require.NoError(t, err)
	require.ElementsMatch(t, ids, idsOf(found), "each id asked for once")
	calls = fake.recorded()[6:]
	require.Equal(t, []string{q.peekMany(500), q.peekMany(100)}, []string{calls[0].query, calls[1].query})
	for _, c := range calls {
		require.False(t, c.inTx, "a read needs no transaction")
	}
	require.Len(t, fake.txEvents, 4)
}

// TestBatchRunsAgainAfterADeadlock: SQL Server rolled the victim back; the whole batch runs again.
func TestBatchRunsAgainAfterADeadlock(t *testing.T) {
	t.Parallel()
	runs := 0
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		runs++
		if runs == 2 { // the second statement of the first attempt
			return answer{err: mssql.Error{Number: 1205, Message: "chosen as the deadlock victim"}}
		}
		return idsAnswer(c)
	})
	var ids []string
	for i := range 501 {
		ids = append(ids, fmt.Sprintf("t-%03d", i))
	}
	removed, err := store.RemoveMany(t.Context(), ids)
	require.NoError(t, err)
	require.Equal(t, ids, removed, "the first attempt's ids are not counted twice")
	require.Len(t, fake.recorded(), 4)
	require.Equal(t, []string{"begin", "rollback", "begin", "commit"}, fake.txEvents)

	store, _ = newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(call) answer {
		return answer{err: mssql.Error{Number: 1205, Message: "chosen as the deadlock victim"}}
	})
	_, err = store.RemoveMany(t.Context(), ids)
	var se mssql.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, int32(1205), se.Number)
}

// TestRelease: one statement per 500 distinct ids that a timeout can have, each its own commit;
// the counts the statements return are added up.
func TestRelease(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		return rowsOf([]driver.Value{int64(len(c.names) - 1)}) // all but one found
	})
	ctx := t.Context()
	var ids []string
	for i := range 700 {
		ids = append(ids, fmt.Sprintf("t-%03d", i))
	}
	n, err := store.Release(ctx, append(append([]string{"bad\xff", "trailing "}, ids...), ids[:10]...))
	require.NoError(t, err)
	require.Equal(t, 698, n)
	calls := fake.recorded()
	require.Equal(t, []string{q.releaseMany(500), q.releaseMany(200)}, []string{calls[0].query, calls[1].query})
	for _, c := range calls {
		require.False(t, c.inTx, "each statement commits alone")
		for _, v := range c.args {
			require.True(t, storable(v.(string)), "%q sent", v)
		}
	}
	require.Equal(t, "t-000", calls[0].args["id0"])
	require.Equal(t, "t-699", calls[1].args["id199"])

	n, err = store.Release(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, fake.recorded(), 2, "nothing to release sends nothing")

	store, _ = newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(call) answer {
		return answer{err: errors.New("connection reset by peer")}
	})
	_, err = store.Release(ctx, ids)
	require.ErrorContains(t, err, "sqlserver: release: connection reset by peer")
}

func idsOf(ts []persistence.Timeout) []string {
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}
