package sqlite

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
