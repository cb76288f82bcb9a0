package sqlstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCompileQueriesNamesTheStatement: New fails, under the backend's name, naming each statement
// that does not compile.
func TestCompileQueriesNamesTheStatement(t *testing.T) {
	t.Parallel()
	q := Standard(`"t"`, Numbered)
	q.Park = "UPDATE t SET parked_reason = @reason WHERE id = @id" // @parkedAt left out
	q.KeyHolder = "SELECT id FROM t WHERE dedup_key = @ky"
	_, err := New(Dialect{Name: "test", SQL: q, Bind: Binding{Style: Numbered}})
	require.ErrorContains(t, err, "test: ")
	require.ErrorContains(t, err, "Park: sqlstore.ParkParams gives @parkedAt")
	require.ErrorContains(t, err, "KeyHolder: the statement uses @ky")
}
