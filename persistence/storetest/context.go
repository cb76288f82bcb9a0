package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

func (s suite) testCancelledContext(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	mustStore(ctx, t, store, timeout("a", now))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	calls := map[string]func(ctx context.Context) error{
		"Store": func(ctx context.Context) error {
			_, err := store.Store(ctx, timeout("b", now))
			return err
		},
		"Next": func(ctx context.Context) error {
			_, _, err := store.Next(ctx)
			return err
		},
		"ClaimDue": func(ctx context.Context) error {
			_, err := store.ClaimDue(ctx, now, 10, time.Minute)
			return err
		},
		"Peek": func(ctx context.Context) error {
			_, err := store.Peek(ctx, "a")
			return err
		},
		"Remove": func(ctx context.Context) error {
			_, err := store.Remove(ctx, "a")
			return err
		},
		"IncrementFailureCount": func(ctx context.Context) error {
			_, err := store.IncrementFailureCount(ctx, "a")
			return err
		},
		"Cancel": func(ctx context.Context) error {
			_, err := store.Cancel(ctx, "a")
			return err
		},
		"CancelByOwner": func(ctx context.Context) error {
			_, err := store.CancelByOwner(ctx, "owner")
			return err
		},
	}
	if inspector, ok := store.(persistence.Inspector); ok {
		calls["Stats"] = func(ctx context.Context) error {
			_, err := inspector.Stats(ctx, time.Now())
			return err
		}
		calls["List"] = func(ctx context.Context) error {
			_, err := inspector.List(ctx, persistence.ListOptions{})
			return err
		}
	}

	for name, call := range calls {
		done := make(chan error, 1)
		go func() { done <- call(cancelled) }()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled, "%s with a cancelled context", name)
		case <-time.After(10 * time.Second):
			require.FailNow(t, "hangs with a cancelled context", name)
		}
	}

	// A cancelled call leaves the store usable, and changed nothing.
	got, err := store.Peek(ctx, "a")
	require.NoError(t, err, "Peek after cancelled calls")
	require.Zero(t, got.FailureCount)
	_, err = store.Peek(ctx, "b")
	require.ErrorIs(t, err, persistence.ErrNotFound)
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
}
