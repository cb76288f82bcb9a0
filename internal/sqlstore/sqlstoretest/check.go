package sqlstoretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// ChecksInfrastructure checks a backend's persistence.SetupChecker: open returns a store, not set
// up, for an endpoint; tables counts the tables where its table would be. A store whose table is
// missing says so, naming the table, with persistence.ErrNotSetUp, and creates nothing; looking
// at it (Stats, List) or cancelling on it fails rather than answering from nothing. Once set up,
// the check passes.
func ChecksInfrastructure[S Store](t *testing.T, open func(ctx context.Context, endpoint string) (S, error), tables func() int) {
	t.Helper()
	ctx := t.Context()
	before := tables()

	store, err := open(ctx, "order")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	checker, ok := any(store).(persistence.SetupChecker)
	require.True(t, ok, "%T implements persistence.SetupChecker", store)

	err = checker.CheckInfrastructure(ctx)
	require.ErrorIs(t, err, persistence.ErrNotSetUp)
	require.ErrorContains(t, err, "order.timeouts", "the error names the missing table")
	require.ErrorContains(t, err, "does not exist")
	require.Equal(t, before, tables(), "checking creates nothing")

	if inspector, ok := any(store).(persistence.Inspector); ok {
		_, err = inspector.Stats(ctx, time.Now())
		require.Error(t, err, "Stats on a missing table is an error, not pending: 0")
		_, err = inspector.List(ctx, persistence.ListOptions{})
		require.Error(t, err, "List on a missing table is an error, not an empty list")
	}
	_, err = store.Cancel(ctx, "a")
	require.Error(t, err, "Cancel on a missing table is an error, not 'not pending'")
	require.Equal(t, before, tables(), "looking and cancelling create nothing")

	require.NoError(t, store.SetupInfrastructure(ctx))
	require.NoError(t, checker.CheckInfrastructure(ctx), "set up")
	require.Equal(t, before+1, tables())
	inserted, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
	require.NoError(t, err)
	require.True(t, inserted)
	require.NoError(t, checker.CheckInfrastructure(ctx), "checking again changes nothing")

	other, err := open(ctx, "orders")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	err = any(other).(persistence.SetupChecker).CheckInfrastructure(ctx)
	require.True(t, errors.Is(err, persistence.ErrNotSetUp), "another endpoint's table is another table: %v", err)
	require.ErrorContains(t, err, "orders.timeouts")
}
