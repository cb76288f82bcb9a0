package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOpenAppliesPragmas checks that Config reaches the connections: what a test of the store's
// behaviour cannot see.
func TestOpenAppliesPragmas(t *testing.T) {
	t.Parallel()
	cases := []struct {
		config      Config
		synchronous int // SQLite's number for the setting
		busyMillis  int
	}{
		{Config{Endpoint: "orders"}, 1, 5000},
		{Config{Endpoint: "orders", Synchronous: "full", BusyTimeout: 1500 * time.Millisecond}, 2, 1500},
		{Config{Endpoint: "orders", Synchronous: "Extra"}, 3, 5000},
	}
	for _, tc := range cases {
		tc.config.Path = filepath.Join(t.TempDir(), "timeouts.db")
		s, err := Open(t.Context(), tc.config)
		require.NoError(t, err)

		for _, db := range s.pools {
			var (
				synchronous, busy int
				journal           string
			)
			require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&synchronous))
			require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA busy_timeout").Scan(&busy))
			require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&journal))
			require.Equal(t, tc.synchronous, synchronous, "synchronous of %+v", tc.config)
			require.Equal(t, tc.busyMillis, busy, "busy_timeout of %+v", tc.config)
			require.Equal(t, "wal", journal)
		}

		var readOnly int
		require.NoError(t, s.reader.QueryRowContext(t.Context(), "PRAGMA query_only").Scan(&readOnly))
		require.Equal(t, 1, readOnly, "the reader pool never writes")
		require.NoError(t, s.Close())
	}
}
