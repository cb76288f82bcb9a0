package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	require.NoError(t, run(ctx, &out), out.String())
	t.Log(out.String())
	require.Contains(t, out.String(), `received "order 42 not paid yet?" after `)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "delivered before its due time")
}

// TestREADMEShowsThisProgram keeps the README's usage example and this program the same: the
// README must hold main.go verbatim in a go code block.
func TestREADMEShowsThisProgram(t *testing.T) {
	t.Parallel()
	source, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	block := "```go\n" + string(source) + "```\n"
	require.True(t, strings.Contains(string(readme), block),
		"README.md must contain examples/usage/main.go verbatim between ```go and ``` fences; copy the file into its usage section")
}
