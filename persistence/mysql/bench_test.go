package mysql_test

import (
	"testing"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

func openBench(b *testing.B) persistence.Store {
	b.Helper()
	dsn, _ := testenv.MySQLDatabase(b)
	store := open(b, mysql.Config{DSN: dsn, Endpoint: "bench"})
	b.Cleanup(func() { _ = store.Close() })
	return store
}

// Benchmark runs the shared store benchmarks (Store, ClaimAndRemove, Peek) on this backend.
func Benchmark(b *testing.B) { storetest.Benchmark(b, openBench) }
