package sqlstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStandardCompiles: every statement Standard makes compiles in the styles of the backends
// that use it, with table names that hold an @ and quotes.
func TestStandardCompiles(t *testing.T) {
	t.Parallel()
	for _, table := range []string{`"timeouts"`, `"s@x"."it's ""@a"""`, "`db`.`t@b`"} {
		for _, style := range []Style{Positional, Numbered} {
			st, err := CompileQueries(Standard(table, style), &Binding{Style: style})
			require.NoError(t, err, "%s %v", table, style)
			require.Contains(t, st.Delete.SQL, table)
			require.NotContains(t, st.Reschedule.SQL, "@due")
		}
	}
}

// TestStandardIDLists: PostgreSQL takes a statement's ids as one array, the others as a list of
// as many placeholders as ids.
func TestStandardIDLists(t *testing.T) {
	t.Parallel()
	require.Contains(t, Standard(`"t"`, Numbered).PeekIn(3), "WHERE id = ANY($1)")
	require.Contains(t, Standard(`"t"`, Positional).RemoveIn(3), "WHERE id IN (?, ?, ?)")
	require.Contains(t, Standard(`"t"`, Positional).UnparkIn(1), "WHERE id IN (?) AND parked_reason IS NOT NULL")
}
