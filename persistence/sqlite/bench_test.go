package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
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
	for _, bs := range benchStores {
		b.Run(bs.name, func(b *testing.B) {
			store := bs.open(b)
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
	}
}

// BenchmarkClaimAndRemove drains a backlog as the poller and dispatcher do: claim a batch of 100
// due ids, then remove each id, from 4 goroutines.
func BenchmarkClaimAndRemove(b *testing.B) {
	for _, bs := range benchStores {
		b.Run(bs.name, func(b *testing.B) {
			store := bs.open(b)
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
		})
	}
}

func fill(ctx context.Context, b *testing.B, store persistence.Store, n int, due time.Time) {
	b.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 8 {
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
