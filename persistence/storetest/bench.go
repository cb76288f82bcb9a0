package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Benchmark measures a backend the way the satellites use it, as sub-benchmarks reporting
// rates: Store (many goroutines storing, as the store satellite under load), ClaimAndRemove
// (4 goroutines claiming batches of 100 due ids and removing each, as poller and dispatcher
// drain a backlog), Peek (one goroutine looking timeouts up, a read that commits nothing), and for
// stores with the batch calls StoreMany (2 goroutines storing batches of 256, as the store
// satellite) and PeekAndRemoveMany (batches of 256 looked up and removed, as the dispatch
// satellite).
// newStore returns an empty store of its own; Benchmark closes it.
func Benchmark(b *testing.B, newStore func(b *testing.B) persistence.Store) {
	b.Run("Store", func(b *testing.B) {
		store := newStore(b)
		defer store.Close()
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
	})

	b.Run("ClaimAndRemove", func(b *testing.B) {
		store := newStore(b)
		defer store.Close()
		ctx := b.Context()
		now := time.Now()
		fill(ctx, b, store, b.N, now.Add(-time.Hour))
		b.ResetTimer()
		var (
			wg      sync.WaitGroup
			removed atomic.Int64
		)
		for range 4 {
			wg.Go(func() {
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
						if ok, err := store.Remove(ctx, id); err != nil || !ok {
							b.Errorf("Remove %q: %v, %v", id, ok, err)
							return
						}
						removed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if int(removed.Load()) != b.N {
			b.Fatalf("removed %d of %d", removed.Load(), b.N)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claim+remove/s")
	})

	b.Run("Peek", func(b *testing.B) {
		store := newStore(b)
		defer store.Close()
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
	})

	b.Run("StoreMany", func(b *testing.B) {
		_, batch := openBatch(b, newStore)
		ctx := b.Context()
		due := time.Now().Add(time.Hour)
		var next atomic.Int64
		b.SetParallelism(2) // the store satellite runs at most 2 batches at once
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ts := make([]persistence.Timeout, 0, benchBatch)
			for pb.Next() {
				ts = ts[:0]
				for range benchBatch {
					ts = append(ts, benchTimeout(next.Add(1), due))
				}
				if _, err := batch.StoreMany(ctx, ts); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "stores/s")
	})

	// The dispatch satellite's path through a backlog: claims of the poller's batch, then
	// PeekMany and RemoveMany per batch of the claimed ids.
	b.Run("ClaimPeekAndRemoveMany", func(b *testing.B) {
		store, batch := openBatch(b, newStore)
		ctx := b.Context()
		now := time.Now()
		fill(ctx, b, store, b.N*benchBatch, now.Add(-time.Hour))
		b.ResetTimer()
		done := 0
		for {
			claimed, err := store.ClaimDue(ctx, now, 2*benchBatch, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			if len(claimed) == 0 {
				break
			}
			for ids := range slices.Chunk(claimed, benchBatch) {
				found, err := batch.PeekMany(ctx, ids)
				if err != nil || len(found) != len(ids) {
					b.Fatalf("PeekMany: %d of %d found, %v", len(found), len(ids), err)
				}
				removed, err := batch.RemoveMany(ctx, ids)
				if err != nil || len(removed) != len(ids) {
					b.Fatalf("RemoveMany: %d of %d removed, %v", len(removed), len(ids), err)
				}
				done += len(ids)
			}
		}
		if done != b.N*benchBatch {
			b.Fatalf("dispatched %d of %d", done, b.N*benchBatch)
		}
		b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "claim+peek+remove/s")
	})

	b.Run("PeekAndRemoveMany", func(b *testing.B) {
		store, batch := openBatch(b, newStore)
		ctx := b.Context()
		fill(ctx, b, store, b.N*benchBatch, time.Now())
		b.ResetTimer()
		ids := make([]string, benchBatch)
		for i := range b.N {
			for j := range ids {
				ids[j] = benchTimeout(int64(i*benchBatch+j+1), time.Time{}).ID
			}
			found, err := batch.PeekMany(ctx, ids)
			if err != nil || len(found) != benchBatch {
				b.Fatalf("PeekMany: %d found, %v", len(found), err)
			}
			removed, err := batch.RemoveMany(ctx, ids)
			if err != nil || len(removed) != benchBatch {
				b.Fatalf("RemoveMany: %d removed, %v", len(removed), err)
			}
		}
		b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "peek+remove/s")
	})
}

// openBatch opens a store for a benchmark of its batch calls, which it skips for a store without
// them, and closes the store when the benchmark ends.
func openBatch(b *testing.B, newStore func(b *testing.B) persistence.Store) (persistence.Store, batchStore) {
	b.Helper()
	store := newStore(b)
	b.Cleanup(func() { _ = store.Close() })
	batch, ok := store.(batchStore)
	if !ok {
		b.Skipf("%T has no batch calls", store)
	}
	return store, batch
}

// benchBatch is the size of the batches the batch benchmarks use: the satellites' default
// MaxBatch.
const benchBatch = 256

func benchTimeout(i int64, due time.Time) persistence.Timeout {
	id := fmt.Sprintf("%020d", i)
	return persistence.Timeout{
		ID:          id,
		Destination: "orders",
		Due:         due,
		Payload:     []byte(`{"order":"12345","amount":99.5}`),
		Metadata:    map[string]string{"_watermill_message_uuid": id, "trace": "abc"},
	}
}

// fill stores n timeouts due at due from 16 goroutines.
func fill(ctx context.Context, b *testing.B, store persistence.Store, n int, due time.Time) {
	b.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if _, err := store.Store(ctx, benchTimeout(i, due)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
