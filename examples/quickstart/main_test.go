package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuickstart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out), out.String())

	text := out.String()
	t.Log("\n" + text)
	require.Equal(t, len(delays), strings.Count(text, "delivered \"reminder"))
	require.Contains(t, text, "restarted on the same store")
	before, after, ok := strings.Cut(text, "restarted on the same store")
	require.True(t, ok)
	require.Equal(t, stopAfter, strings.Count(before, "delivered \""))
	require.Equal(t, len(delays)-stopAfter, strings.Count(after, "delivered \""), "timeouts scheduled before the stop are delivered after it")
	require.Contains(t, text, "none early")
}
