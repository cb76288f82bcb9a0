package sqlstore

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// TestNotOpened: a store that was not opened fails every call, saying so, rather than panic.
func TestNotOpened(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, Opened(nil), "not opened")
	s := NotOpened("test")
	_, err := s.Store(t.Context(), persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
	require.ErrorContains(t, err, "test: the store was not opened")
	_, err = s.Remove(t.Context(), "a")
	require.ErrorContains(t, err, "test: the store was not opened")
	require.Nil(t, DB(nil))
}

// TestUnstorableKeysAreNotLookedUp: an id the database could take for another (see
// Check.Storable) is found in no statement: none is sent.
func TestUnstorableKeysAreNotLookedUp(t *testing.T) {
	t.Parallel()
	f := &fakeWriter{affected: func([]any) (int64, error) { return 1, nil }}
	s := fakeStore(t, f, func(d *Dialect) { d.Check.Storable = func(id string) bool { return id != "bad" } })
	removed, err := s.Remove(t.Context(), "bad")
	require.NoError(t, err)
	require.False(t, removed)
	n, err := s.CancelByOwner(t.Context(), "bad")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, f.calls)
	removed, err = s.Remove(t.Context(), "good")
	require.NoError(t, err)
	require.True(t, removed)
	require.Equal(t, []execCall{{StatementsOf(s).Delete.SQL, []any{"good"}}}, f.calls)
}

// TestStoreMeetingThePrimaryKey: Store's insert failing on the primary key (Errors.IsDuplicate)
// is a timeout stored already, not an error; another error is returned, wrapped.
func TestStoreMeetingThePrimaryKey(t *testing.T) {
	t.Parallel()
	duplicate, broken := errors.New("duplicate"), errors.New("broken")
	fail := duplicate
	f := &fakeWriter{affected: func([]any) (int64, error) { return 0, fail }}
	s := fakeStore(t, f, func(d *Dialect) { d.Errors.IsDuplicate = func(err error) bool { return errors.Is(err, duplicate) } })
	timeout := persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()}
	stored, err := s.Store(t.Context(), timeout)
	require.NoError(t, err)
	require.False(t, stored)
	fail = broken
	_, err = s.Store(t.Context(), timeout)
	require.ErrorIs(t, err, broken)
	require.ErrorContains(t, err, `test: store "a"`)
}
