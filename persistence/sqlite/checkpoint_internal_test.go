package sqlite

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// TestCheckpointerCopiesTheWAL checks that with SQLite's automatic checkpoint off on the writer,
// the store's checkpointer copies what is stored into the database file while the writes go on,
// and that the WAL starts over rather than growing with every write.
func TestCheckpointerCopiesTheWAL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeouts.db")
	s, err := Open(t.Context(), Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	var auto int
	require.NoError(t, s.writer.db.QueryRowContext(t.Context(), "PRAGMA wal_autocheckpoint").Scan(&auto))
	require.Zero(t, auto, "the writer's commits never checkpoint")

	// Twice the WAL's reset size, stored without a pause.
	const payload, batch = 4096, 64
	total := 2 * walResetPages * 4096
	due := time.Now().Add(time.Hour)
	for n := 0; n < total; n += payload * batch {
		ts := make([]persistence.Timeout, batch)
		for i := range ts {
			ts[i] = persistence.Timeout{ID: fmt.Sprintf("t-%d-%d", n, i), Destination: "orders", Due: due,
				Payload: bytes.Repeat([]byte{byte(i)}, payload)}
		}
		_, err := s.StoreMany(t.Context(), ts)
		require.NoError(t, err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		db, err := os.Stat(path)
		if !assert.NoError(c, err) {
			return
		}
		assert.GreaterOrEqual(c, db.Size(), int64(total), "the database file holds what was stored")
	}, 30*time.Second, 50*time.Millisecond)
	wal, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	require.Less(t, wal.Size(), int64(total), "the WAL started over")
}

// TestCloseLeavesTheFileClosed checks that Close closes every descriptor of the database file,
// the one the checkpointer syncs through included, and that a store opened again on the file
// finds what the first one stored.
func TestCloseLeavesTheFileClosed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts the process's descriptors in /proc/self/fd, which only Linux has")
	}
	path := filepath.Join(t.TempDir(), "timeouts.db")
	s, err := Open(t.Context(), Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	require.NotZero(t, descriptorsOf(t, path), "the store has the file open")
	due := time.Now().Add(time.Hour)
	_, err = s.Store(t.Context(), persistence.Timeout{ID: "t-1", Destination: "orders", Due: due, Payload: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.Zero(t, descriptorsOf(t, path), "Close left the file open")

	s, err = Open(t.Context(), Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	got, err := s.Peek(t.Context(), "t-1")
	require.NoError(t, err)
	require.Equal(t, "orders", got.Destination)
}

// descriptorsOf counts this process's open descriptors of the file at path.
func descriptorsOf(t *testing.T, path string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && target == path {
			n++
		}
	}
	return n
}
