package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/satellites"
)

// The dispatch satellite dispatches in batches on this store.
var _ satellites.BatchStore = (*sqlite.Store)(nil)

func TestPeekManyAndRemoveMany(t *testing.T) {
	t.Parallel()
	store := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Endpoint: "orders"})
	ctx := context.Background()
	due := time.Now().Add(-time.Minute).Truncate(time.Microsecond).UTC()
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("t-%d", i)
		ids = append(ids, id)
		_, err := store.Store(ctx, persistence.Timeout{
			ID: id, Destination: "payments", Due: due, Owner: "order-7",
			Payload: []byte{byte(i), 0, 0xff}, Metadata: map[string]string{"n": fmt.Sprint(i)}, FailureCount: i,
		})
		require.NoError(t, err)
	}

	found, err := store.PeekMany(ctx, append([]string{"missing"}, ids[1:4]...))
	require.NoError(t, err)
	slices.SortFunc(found, func(a, b persistence.Timeout) int { return strings.Compare(a.ID, b.ID) })
	require.Len(t, found, 3, "the missing id is left out")
	for j, got := range found {
		i := j + 1
		want, err := store.Peek(ctx, ids[i])
		require.NoError(t, err)
		require.Equal(t, want, got, "PeekMany reads what Peek reads")
		require.Equal(t, []byte{byte(i), 0, 0xff}, got.Payload)
		require.True(t, due.Equal(got.Due))
	}
	none, err := store.PeekMany(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, none)

	removed, err := store.RemoveMany(ctx, []string{ids[0], ids[2], "missing"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{ids[0], ids[2]}, removed, "only what was there")
	removed, err = store.RemoveMany(ctx, []string{ids[0], ids[4]})
	require.NoError(t, err)
	require.Equal(t, []string{ids[4]}, removed, "a second removal finds it gone")
	for _, id := range []string{ids[0], ids[2], ids[4]} {
		_, err := store.Peek(ctx, id)
		require.ErrorIs(t, err, persistence.ErrNotFound)
	}
	left, err := store.PeekMany(ctx, ids)
	require.NoError(t, err)
	require.Len(t, left, 2)
}

func TestStoreMany(t *testing.T) {
	t.Parallel()
	store := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Endpoint: "orders"})
	ctx := context.Background()
	due := time.Now().Add(time.Hour).Truncate(time.Microsecond).UTC()
	timeout := func(id string) persistence.Timeout {
		return persistence.Timeout{ID: id, Destination: "payments", Due: due, Owner: "o-" + id,
			Payload: []byte(id), Metadata: map[string]string{"id": id}}
	}
	_, err := store.Store(ctx, timeout("old"))
	require.NoError(t, err)

	inserted, err := store.StoreMany(ctx, []persistence.Timeout{timeout("a"), timeout("old"), timeout("b")})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b"}, inserted, "a stored id is not inserted again")
	for _, id := range []string{"a", "b"} {
		got, err := store.Peek(ctx, id)
		require.NoError(t, err)
		require.Equal(t, timeout(id), got)
	}
	next, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, due.Equal(next), "claimable from its due time")

	bad := timeout("c")
	bad.Destination = ""
	_, err = store.StoreMany(ctx, []persistence.Timeout{timeout("d"), bad})
	require.ErrorIs(t, err, persistence.ErrInvalidTimeout)
	_, err = store.Peek(ctx, "d")
	require.ErrorIs(t, err, persistence.ErrNotFound, "none stored when one is invalid")
}

func TestPeekManyAndRemoveManyBeyondOneINList(t *testing.T) {
	t.Parallel()
	store := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Endpoint: "orders"})
	ctx := context.Background()
	var ts []persistence.Timeout
	var ids []string
	for i := range 1201 {
		id := fmt.Sprintf("t-%04d", i)
		ids = append(ids, id)
		ts = append(ts, persistence.Timeout{ID: id, Destination: "payments", Due: time.Now(), Payload: []byte(id)})
	}
	inserted, err := store.StoreMany(ctx, ts)
	require.NoError(t, err)
	require.Len(t, inserted, len(ids))
	found, err := store.PeekMany(ctx, append(ids, "missing"))
	require.NoError(t, err)
	require.Len(t, found, len(ids))
	removed, err := store.RemoveMany(ctx, append(ids, "missing"))
	require.NoError(t, err)
	require.ElementsMatch(t, ids, removed)
}
