package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// TestSQLExactlyOnceExample runs the example against the PostgreSQL `make test` starts (it is
// skipped without one, and fails under CI).
func TestSQLExactlyOnceExample(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	require.NoError(t, run(ctx, &out, dsn), out.String())
	text := out.String()
	t.Logf("finished in %s:\n%s", time.Since(start).Round(time.Millisecond), text)

	require.Contains(t, text, "refused, as it should be: sqltransport: exactly once is not possible: the store is a *memory.store")
	require.Contains(t, text, "exactly once: the transport and the store share one PostgreSQL database")
	require.Equal(t, 3, strings.Count(text, "scheduled "))
	require.Equal(t, 3, strings.Count(text, ", delivery #1"))
	require.NotContains(t, text, "delivery #2")
	require.Contains(t, text, "each of the 3 reminders delivered exactly once; 0 timeouts left in the store")
	// In the order they were due, not the order they were scheduled.
	require.Less(t, strings.Index(text, "(remind about order-42)"), strings.Index(text, "(remind about order-99)"))
	require.Less(t, strings.Index(text, "(remind about order-99)"), strings.Index(text, "(remind about order-17)"))
	require.NotContains(t, text, " -", "nothing delivered before it was due")
}
