package sqlite_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// TestOneFailingChangeFailsAlone stores from many goroutines, so that changes are committed in
// groups, while a trigger makes some of them fail: only those may fail.
func TestOneFailingChangeFailsAlone(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := openDB(t, filepath.Join(t.TempDir(), "timeouts.db"))
	store, err := sqlite.New(ctx, db, sqlite.Config{Table: "timeouts"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	_, err = db.ExecContext(ctx, `CREATE TRIGGER poison BEFORE INSERT ON timeouts
WHEN NEW.destination = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned'); END`)
	require.NoError(t, err)

	const n = 2000
	var (
		wg   sync.WaitGroup
		errs = make([]error, n)
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				destination := "billing"
				if i%10 == 0 {
					destination = "poison"
				}
				_, errs[i] = store.Store(ctx, persistence.Timeout{
					ID: fmt.Sprintf("w%04d", i), Destination: destination, Due: time.Now(),
				})
			}
		}()
	}
	wg.Wait()

	for i, err := range errs {
		_, peekErr := store.Peek(ctx, fmt.Sprintf("w%04d", i))
		if i%10 == 0 {
			require.ErrorContains(t, err, "poisoned", "change %d", i)
			require.ErrorIs(t, peekErr, persistence.ErrNotFound, "change %d", i)
		} else {
			require.NoError(t, err, "change %d", i)
			require.NoError(t, peekErr, "change %d", i)
		}
	}
}

func TestCloseWhileWriting(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "timeouts.db"), Endpoint: "orders"})
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := store.Store(ctx, persistence.Timeout{
					ID: fmt.Sprintf("%d-%d", w, i), Destination: "billing", Due: time.Now(),
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, store.Close())
	wg.Wait()
	close(errs)
	for err := range errs {
		require.True(t, errors.Is(err, sqlite.ErrClosed), "a write after Close: %v", err)
	}
	require.NoError(t, store.Close(), "a second Close")
	_, err = store.Remove(ctx, "0-0")
	require.ErrorIs(t, err, sqlite.ErrClosed)
}
