package memory_test

import (
	"testing"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/storetest"
)

// Benchmark runs the shared store benchmarks (Store, ClaimAndRemove, Peek) on the memory store.
func Benchmark(b *testing.B) {
	storetest.Benchmark(b, func(*testing.B) persistence.Store { return memory.New() })
}
