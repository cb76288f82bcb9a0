package sqlstore

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTableName: Table wins; without it, the endpoint's NServiceBus name.
func TestTableName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "t", TableName("orders", "t"))
	require.Equal(t, "orders.timeouts", TableName("orders", ""))
	require.Empty(t, TableName("", ""))
}

// TestCheckConfig: every problem is reported at once, under the backend's name, and each stays
// testable with errors.Is.
func TestCheckConfig(t *testing.T) {
	t.Parallel()
	bad := errors.New("bad table")
	own := errors.New("own problem")
	require.NoError(t, CheckConfig("pg", "t", func(string) error { return nil }))
	err := CheckConfig("pg", "", func(string) error { return bad }, own)
	require.ErrorContains(t, err, "pg: invalid config: Endpoint or Table must be set")
	require.ErrorIs(t, err, own)
	require.NotErrorIs(t, err, bad, "no table is checked when there is none")
	err = CheckConfig("pg", "t", func(string) error { return bad }, nil, CheckMaxOpenConns(-1))
	require.ErrorIs(t, err, bad)
	require.ErrorContains(t, err, "MaxOpenConns cannot be negative (-1)")
	require.NoError(t, CheckMaxOpenConns(0))
}
