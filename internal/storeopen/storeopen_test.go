package storeopen_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/storeopen"
)

type mark = storeopen.Mark

type store struct {
	mark
	n int
}

func newStore() *store { return &store{mark: storeopen.Opened()} }

type wrapper struct{ *store }

type foreign struct{ mark int } // a field by that name is not a Mark

func TestCheck(t *testing.T) {
	t.Parallel()
	require.Equal(t, storeopen.Open, storeopen.Check(newStore()))
	require.Equal(t, storeopen.NotOpened, storeopen.Check(&store{n: 1}), "fields set, Mark not: not made by its constructor")
	require.Equal(t, storeopen.Open, storeopen.Check(wrapper{newStore()}), "a user's type embedding an opened store")
	require.Equal(t, storeopen.NotOpened, storeopen.Check(wrapper{}), "a user's type embedding a nil store")
	require.Equal(t, storeopen.NotOpened, storeopen.Check(&wrapper{}))
	require.Equal(t, storeopen.Unknown, storeopen.Check(&foreign{mark: 1}))
	require.Equal(t, storeopen.Unknown, storeopen.Check(store{}), "a value, not a pointer: the Mark's method is not in its method set")
}
