package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetriesExample(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	require.NoError(t, run(ctx, &out), out.String())
	took := time.Since(start)

	text := out.String()
	t.Logf("finished in %s:\n%s", took, text)
	require.Less(t, took, 30*time.Second)

	require.Equal(t, 3, strings.Count(text, "charge  order-42 attempt"), "fails twice, then succeeds")
	require.Contains(t, text, "charge  order-42 attempt 1: failed")
	require.Contains(t, text, "charge  order-42 attempt 2 (delayed retry 1): failed")
	require.Contains(t, text, "charge  order-42 attempt 3 (delayed retry 2): charged")

	require.Equal(t, 4, strings.Count(text, "invoice invoice-7 attempt"), "1 + 1 immediate + 2 delayed")
	require.Contains(t, text, "invoice invoice-7 attempt 2: failed", "the immediate retry")
	require.Contains(t, text, "invoice invoice-7 attempt 4 (delayed retry 2): failed")
	require.Contains(t, text, "error queue: invoice-7 from invoices (handler invoice) after 4 attempts, 2 delayed retries: customer has no billing address")
	require.Contains(t, text, "order-42 ended charged; invoice-7 ended on the error queue")
	require.Equal(t, 1, strings.Count(text, "error queue:"), "only the invoice ends there")
}
