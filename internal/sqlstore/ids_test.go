package sqlstore

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInSize: a padded list of n ids has the next power of two.
func TestInSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 4, 5: 8, 64: 64, 65: 128, 256: 256, 300: 512} {
		require.Equal(t, want, InSize(n), "InSize(%d)", n)
	}
	require.Equal(t, []int{1, 2, 4, 8}, InSizes(8))
}

// TestIDLists: the ids of a statement made for n ids are bound as the Binding says: each as text
// (padded with the last id with PadIn), as one array, or by name.
func TestIDLists(t *testing.T) {
	t.Parallel()
	made := func(n int) string { return Standard(`"t"`, Positional).PeekIn(n) }
	ids := []string{"a", "b", "c"}

	query, args := (&Binding{}).in(made, ids)
	require.Equal(t, made(3), query)
	require.Equal(t, []any{"a", "b", "c"}, args)

	query, args = (&Binding{PadIn: true, BinaryText: true}).in(made, ids)
	require.Equal(t, made(4), query)
	require.Equal(t, []any{[]byte("a"), []byte("b"), []byte("c"), []byte("c")}, args)

	_, args = (&Binding{IDs: IDsArray}).in(made, ids)
	require.Equal(t, []any{ids}, args)

	_, args = (&Binding{IDs: IDsNamed}).in(made, ids[:2])
	require.Equal(t, []any{sql.Named("id0", "a"), sql.Named("id1", "b")}, args)
}
