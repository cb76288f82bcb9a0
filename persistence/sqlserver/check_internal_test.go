package sqlserver

import (
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// TestCheckInfrastructureStatement: the check is one statement with no parameters that names
// only the store's table, whatever its name, in a string literal OBJECT_ID reads.
func TestCheckInfrastructureStatement(t *testing.T) {
	t.Parallel()
	for name, config := range goldenCases() {
		config.setDefaults()
		q := newQueries(config.Schema, config.Table)
		cols, err := tableColumns(q.setupTable)
		require.NoError(t, err)
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.name
		}
		params, err := checkStatement(q.tableExists(), config.Schema, config.Table, names)
		require.NoError(t, err, "%s:\n%s", name, q.tableExists())
		require.Empty(t, params, name)
		resultCols, err := resultColumns(q.tableExists())
		require.NoError(t, err)
		require.Len(t, resultCols, 2, name)
	}
}

func TestCheckInfrastructureReadsTheCount(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: ordersEndpoint})
	var (
		tables, current int64
		fail            error
	)
	store, fake := newFakeStore(t, Config{Endpoint: ordersEndpoint}, func(c call) answer {
		if c.query != q.tableExists() {
			t.Errorf("unexpected statement:\n%s", c.query)
		}
		if fail != nil {
			return answer{err: fail}
		}
		return rowsOf([]driver.Value{tables, current})
	})
	ctx := t.Context()

	err := store.CheckInfrastructure(ctx)
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.EqualError(t, err, "sqlserver: table [dbo].[orders.timeouts] does not exist (persistence: not set up)")

	tables = 1 // made by an older version
	err = store.CheckInfrastructure(ctx)
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.EqualError(t, err, "sqlserver: table [dbo].[orders.timeouts] was made by an older version: "+
		"SetupInfrastructure adds its new columns (persistence: not set up)")

	current = 1
	require.NoError(t, store.CheckInfrastructure(ctx))

	fail = errors.New("connection reset by peer")
	err = store.CheckInfrastructure(ctx)
	require.ErrorContains(t, err, "sqlserver: check [dbo].[orders.timeouts]: ")
	require.ErrorIs(t, err, fail)
	require.NotErrorIs(t, err, persistence.ErrNotSetUp, "an unreachable server is not a missing table")

	require.Len(t, fake.recorded(), 4, "one statement a check, in no transaction")
	require.Empty(t, fake.txEvents)
}
