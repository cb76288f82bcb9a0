package batcher_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/batcher"
)

// recorder is a handle func that records its batches. While its gate is closed, a batch waits
// in handle, as one waiting on the store or the broker does.
type recorder[T any] struct {
	mu      sync.Mutex
	batches [][]T
	running int // batches inside handle now
	most    int // the most batches inside handle at once
	gate    chan struct{}
	answer  func(T) error
}

func newRecorder[T any]() *recorder[T] {
	g := make(chan struct{})
	close(g)
	return &recorder[T]{gate: g}
}

// hold makes the next batches wait in handle until release.
func (r *recorder[T]) hold() { r.mu.Lock(); r.gate = make(chan struct{}); r.mu.Unlock() }

// release lets the held batches go.
func (r *recorder[T]) release() { r.mu.Lock(); close(r.gate); r.mu.Unlock() }

func (r *recorder[T]) handle(batch []*batcher.Request[T]) {
	items := make([]T, len(batch))
	for i, req := range batch {
		items[i] = req.Item
	}
	r.mu.Lock()
	r.batches = append(r.batches, items)
	r.running++
	r.most = max(r.most, r.running)
	gate := r.gate
	r.mu.Unlock()
	<-gate
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	for _, req := range batch {
		var err error
		if r.answer != nil {
			err = r.answer(req.Item)
		}
		req.Finish(err)
	}
}

func (r *recorder[T]) seen() (batches [][]T, running, most int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches), r.running, r.most
}

func newBatcher[T any](t *testing.T, cfg batcher.Config, r *recorder[T]) *batcher.Batcher[T] {
	t.Helper()
	b, err := batcher.New(cfg, r.handle)
	require.NoError(t, err)
	return b
}

// doAsync runs Do on a goroutine of its own and returns its results on the channel.
func doAsync[T any](b *batcher.Batcher[T], items ...T) <-chan []error {
	done := make(chan []error, 1)
	go func() { done <- b.Do(items...) }()
	return done
}

func TestALoneItemIsHandledAtOnceAsABatchOfOne(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder[int]()
		b := newBatcher(t, batcher.Config{Max: 10, MaxBatchers: 4}, r)
		require.Equal(t, []error{nil}, b.Do(7))
		batches, _, _ := r.seen()
		require.Equal(t, [][]int{{7}}, batches)
	})
}

// Callers that arrive while a batch is running wait, then go together in the next batch.
// One of them leads it: the batcher has no goroutine of its own.
func TestCallersArrivingDuringABatchShareTheNext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder[int]()
		r.hold()
		b := newBatcher(t, batcher.Config{Max: 100, MaxBatchers: 1}, r)
		first := doAsync(b, 0)
		synctest.Wait() // the first batch waits in handle
		var later []<-chan []error
		for i := 1; i <= 20; i++ {
			later = append(later, doAsync(b, i))
		}
		synctest.Wait() // every later caller waits in Do
		batches, running, _ := r.seen()
		require.Equal(t, [][]int{{0}}, batches, "no second batch while MaxBatchers are running")
		require.Equal(t, 1, running)

		r.release()
		require.Equal(t, []error{nil}, <-first)
		for _, done := range later {
			require.Equal(t, []error{nil}, <-done)
		}
		batches, _, _ = r.seen()
		require.Len(t, batches, 2, "the waiting callers go in one batch")
		require.ElementsMatch(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, batches[1])
	})
}

// The items of one call are batched together, up to Max each batch, and answered in their order.
func TestManyItemsOfOneCallAreSplitByMaxAndAnsweredInOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder[int]()
		r.answer = func(x int) error {
			if x%2 == 1 {
				return fmt.Errorf("odd %d", x)
			}
			return nil
		}
		b := newBatcher(t, batcher.Config{Max: 3, MaxBatchers: 1}, r)
		errs := b.Do(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
		require.Len(t, errs, 10)
		for i, err := range errs {
			if i%2 == 1 {
				require.EqualError(t, err, fmt.Sprintf("odd %d", i), "item %d's own result", i)
			} else {
				require.NoError(t, err, "item %d", i)
			}
		}
		batches, _, most := r.seen()
		require.Equal(t, [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}, batches)
		require.Equal(t, 1, most)
	})
}

// A further batch starts beside a running one only for MinParallel waiting items.
func TestAFurtherBatchStartsOnlyForMinParallelWaitingItems(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder[int]()
		r.hold()
		b := newBatcher(t, batcher.Config{Max: 2, MaxBatchers: 4, MinParallel: 5}, r)
		first := doAsync(b, 0)
		synctest.Wait()
		four := doAsync(b, 1, 2, 3, 4)
		synctest.Wait()
		_, running, _ := r.seen()
		require.Equal(t, 1, running, "4 waiting items are fewer than MinParallel: they wait")

		fifth := doAsync(b, 5)
		synctest.Wait()
		_, running, _ = r.seen()
		require.Equal(t, 2, running, "5 waiting items start a second batch")

		r.release()
		for _, done := range []<-chan []error{first, four, fifth} {
			for _, err := range <-done {
				require.NoError(t, err)
			}
		}
		batches, _, _ := r.seen()
		var all []int
		for _, batch := range batches {
			require.LessOrEqual(t, len(batch), 2, "no batch beyond Max")
			all = append(all, batch...)
		}
		require.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5}, all, "each item handled once")
	})
}

// No more than MaxBatchers batches run at once, however many callers wait.
func TestMaxBatchersBoundsTheBatchesRunningAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder[int]()
		r.hold()
		b := newBatcher(t, batcher.Config{Max: 1, MaxBatchers: 3}, r)
		var calls []<-chan []error
		for i := range 30 {
			calls = append(calls, doAsync(b, i))
		}
		synctest.Wait()
		_, running, _ := r.seen()
		require.Equal(t, 3, running)
		r.release()
		for _, done := range calls {
			require.Equal(t, []error{nil}, <-done)
		}
		batches, _, most := r.seen()
		require.Len(t, batches, 30)
		require.Equal(t, 3, most)
	})
}

// key is a Keyed item: its name is its key.
type key string

func (k key) Key() string { return string(k) }

// A Keyed item whose key a running batch holds waits for that batch.
// The other items of its batch go on meanwhile.
func TestAKeyIsNeverHandledByTwoBatchesAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		handling := map[key]int{}
		twice := false // a key was in two batches at once
		var order []key
		gate := make(chan struct{})
		b, err := batcher.New(batcher.Config{Max: 10, MaxBatchers: 2}, func(batch []*batcher.Request[key]) {
			mu.Lock()
			for _, r := range batch {
				handling[r.Item]++
				twice = twice || handling[r.Item] > 1
				order = append(order, r.Item)
			}
			wait := batch[0].Item == "a" && len(order) == 1
			mu.Unlock()
			if wait {
				<-gate // the first batch of "a" waits on the broker
			}
			mu.Lock()
			for _, r := range batch {
				handling[r.Item]--
			}
			mu.Unlock()
			for _, r := range batch {
				r.Finish(nil)
			}
		})
		require.NoError(t, err)

		first := doAsync(b, key("a"))
		synctest.Wait()
		second := doAsync(b, key("b"), key("a"))
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []key{"a", "b"}, order, "b goes on beside the running a; the second a waits")
		mu.Unlock()

		close(gate)
		require.Equal(t, []error{nil}, <-first)
		require.Equal(t, []error{nil, nil}, <-second)
		require.Equal(t, []key{"a", "b", "a"}, order, "the second a is handled once the first is done")
		require.False(t, twice, "a key was handled by two batches at once")
	})
}

func TestFirstOfEachKeepsTheFirstRequestForEachKey(t *testing.T) {
	t.Parallel()
	var batch []*batcher.Request[string]
	for _, id := range []string{"a", "b", "a", "c", "b", "a"} {
		batch = append(batch, &batcher.Request[string]{Item: id})
	}
	first, again := batcher.FirstOfEach(batch, func(s string) string { return s })
	require.Equal(t, []*batcher.Request[string]{batch[0], batch[1], batch[3]}, first)
	require.Equal(t, []*batcher.Request[string]{batch[2], batch[4], batch[5]}, again)
}

// EachAlone hands each request to handle as a batch of one, all at the same time.
func TestEachAloneHandlesEachAsABatchOfOneSideBySide(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder[int]()
		r.hold()
		// The batch handler retries its batch item by item, as the satellites do.
		done := make(chan []error, 1)
		b, err := batcher.New(batcher.Config{Max: 10}, func(batch []*batcher.Request[int]) {
			batcher.EachAlone(batch, r.handle)
		})
		require.NoError(t, err)
		go func() { done <- b.Do(1, 2, 3, 4, 5) }()
		synctest.Wait()
		_, running, _ := r.seen()
		require.Equal(t, 5, running, "all at the same time")
		r.release()
		require.Equal(t, []error{nil, nil, nil, nil, nil}, <-done)
		batches, _, _ := r.seen()
		require.Len(t, batches, 5)
		for _, batch := range batches {
			require.Len(t, batch, 1)
		}
	})
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []batcher.Config{{Max: -1}, {MaxBatchers: -1}, {MinParallel: -1}} {
		_, err := batcher.New(cfg, func([]*batcher.Request[int]) {})
		require.ErrorIs(t, err, batcher.ErrInvalidConfig, "%+v", cfg)
	}
	// Zero values: batches of one, one at a time.
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder[int]()
		b := newBatcher(t, batcher.Config{}, r)
		require.Equal(t, []error{nil, nil, nil}, b.Do(1, 2, 3))
		batches, _, most := r.seen()
		require.Equal(t, [][]int{{1}, {2}, {3}}, batches)
		require.Equal(t, 1, most)
	})
	require.True(t, errors.Is(batcher.Config{Max: -1}.Validate(), batcher.ErrInvalidConfig))
}
