package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) persistence.Store {
		store, err := sqlite.Open(t.Context(), sqlite.Config{
			Path:     filepath.Join(t.TempDir(), "timeouts.db"),
			Endpoint: "orders",
		})
		require.NoError(t, err)
		return store
	})
}
