package mysql_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
)

func openBench(b *testing.B) persistence.Store {
	b.Helper()
	dsn, _ := testenv.MySQLDatabase(b)
	store := open(b, mysql.Config{DSN: dsn, Endpoint: "bench"})
	b.Cleanup(func() { _ = store.Close() })
	return store
}

func benchTimeout(i int64, due time.Time) persistence.Timeout {
	id := fmt.Sprintf("%020d", i)
	return persistence.Timeout{
		ID:          id,
		Destination: "orders",
		Due:         due,
		Payload:     []byte(`{"order":"12345","amount":99.5}`),
		Metadata:    map[string]string{"_watermill_message_uuid": id, "timeout.destination": "orders"},
	}
}

// BenchmarkStore stores timeouts from many goroutines, as the Store satellite does under load.
func BenchmarkStore(b *testing.B) {
	store := openBench(b)
	ctx := b.Context()
	due := time.Now().Add(time.Hour)
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := store.Store(ctx, benchTimeout(next.Add(1), due)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "stores/s")
}

// BenchmarkClaimAndRemove drains a backlog as the poller and dispatcher do: claim a batch of 100
// due ids, then remove each id, from 4 goroutines.
func BenchmarkClaimAndRemove(b *testing.B) {
	store := openBench(b)
	ctx := b.Context()
	now := time.Now()
	fill(ctx, b, store, b.N, now.Add(-time.Hour))
	b.ResetTimer()

	var (
		wg      sync.WaitGroup
		removed atomic.Int64
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ids, err := store.ClaimDue(ctx, now, 100, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				if len(ids) == 0 {
					return
				}
				for _, id := range ids {
					ok, err := store.Remove(ctx, id)
					if err != nil || !ok {
						b.Errorf("Remove %q: %v, %v", id, ok, err)
						return
					}
					removed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if int(removed.Load()) != b.N {
		b.Fatalf("removed %d of %d", removed.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claim+remove/s")
}

func fill(ctx context.Context, b *testing.B, store persistence.Store, n int, due time.Time) {
	b.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if _, err := store.Store(ctx, benchTimeout(i, due)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkPeek looks timeouts up one after another, as one dispatcher goroutine does: a read
// that commits nothing, so it measures round trips rather than the disk.
func BenchmarkPeek(b *testing.B) {
	store := openBench(b)
	ctx := b.Context()
	const n = 1000
	fill(ctx, b, store, n, time.Now())
	b.ResetTimer()
	for i := range b.N {
		if _, err := store.Peek(ctx, benchTimeout(int64(i%n)+1, time.Time{}).ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "peeks/s")
}
