package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

// benchStores are the set-ups compared: Open's single writer connection beside a reader pool,
// with NORMAL and FULL synchronous, and New on a caller's plain *sql.DB, whose pool serves reads
// and writes alike.
var benchStores = []struct {
	name string
	open func(b *testing.B) persistence.Store
}{
	{"Open/NORMAL", openBench("NORMAL")},
	{"Open/FULL", openBench("FULL")},
	{"New/NORMAL", func(b *testing.B) persistence.Store {
		path := filepath.Join(b.TempDir(), "timeouts.db")
		db, err := sql.Open("sqlite", "file:"+path+
			"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
		require.NoError(b, err)
		b.Cleanup(func() { _ = db.Close() })
		store, err := sqlite.New(b.Context(), db, sqlite.Config{Endpoint: "bench"})
		require.NoError(b, err)
		return store
	}},
}

func openBench(synchronous string) func(b *testing.B) persistence.Store {
	return func(b *testing.B) persistence.Store {
		store, err := sqlite.Open(b.Context(), sqlite.Config{
			Path:        filepath.Join(b.TempDir(), "timeouts.db"),
			Endpoint:    "bench",
			Synchronous: synchronous,
		})
		require.NoError(b, err)
		return store
	}
}

// Benchmark runs the shared store benchmarks (Store, ClaimAndRemove, Peek) on each set-up.
func Benchmark(b *testing.B) {
	for _, bs := range benchStores {
		b.Run(bs.name, func(b *testing.B) { storetest.Benchmark(b, bs.open) })
	}
}
