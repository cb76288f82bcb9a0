package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuickGoChannelRun runs the program as make bench does, on the one system that needs no
// server, with tiny counts: the table, the targets and the Markdown file come out, and every
// message arrived once and on time. It asserts no rate or lateness.
func TestQuickGoChannelRun(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "results.md")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{
		"-mode", "quick", "-services", "", "-run", `GoChannel \+ memory`,
		"-backlog", "300", "-precision-rate", "50", "-precision-duration", "1s", "-out", out,
	}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())

	table := stdout.String()
	for _, kind := range []string{"precision", "backlog"} {
		row := line(t, table, "GoChannel + memory — "+kind)
		require.NotContains(t, row, "not run")
		fields := strings.Fields(row)
		// GoChannel + memory — kind, messages, publish/s, drain/s, p50, p99, max, early, lost, dup, notes
		require.Equal(t, []string{"0", "0", "0"}, fields[11:14], "early, lost, duplicated in %q", row)
	}
	require.Contains(t, table, "| target | measured | met |")

	md, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(md), "| GoChannel + memory — backlog | 300 |")
	require.Contains(t, string(md), "## Targets")
	require.Contains(t, table, "Markdown: "+out)
}

func TestUnknownModeIsRefused(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-mode", "slow", "-services", ""}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), `unknown mode "slow"`)
}

func TestParseEnv(t *testing.T) {
	t.Parallel()
	vars := parseEnv("# comment\nexport A=amqp://guest:guest@127.0.0.1:5702/\nexport B='postgres://p@h:5462/db?sslmode=disable'\nC=skipped\n")
	require.Equal(t, map[string]string{
		"A": "amqp://guest:guest@127.0.0.1:5702/",
		"B": "postgres://p@h:5462/db?sslmode=disable",
	}, vars)
}

func line(t *testing.T, text, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line starting %q in:\n%s", prefix, text)
	return ""
}

// TestScaleSwitch: BENCH_SCALE sets the pending count of the scale rows, -scale overrides it, and
// -scale-out sets the scale-out backlog.
func TestScaleSwitch(t *testing.T) {
	t.Setenv("BENCH_SCALE", "10m")
	plan := func(args ...string) (int, int, error) {
		o, err := parse(args, io.Discard)
		require.NoError(t, err)
		p, err := o.plan()
		return p.ScalePending, p.ScaleOutBacklog, err
	}
	pending, backlog, err := plan("-mode", "full")
	require.NoError(t, err)
	require.Equal(t, 10000000, pending)
	require.Equal(t, 100000, backlog, "the full run's")
	pending, backlog, err = plan("-mode", "quick", "-scale", "0", "-scale-out", "5k")
	require.NoError(t, err)
	require.Equal(t, 0, pending)
	require.Equal(t, 5000, backlog)
	_, _, err = plan("-scale", "lots")
	require.ErrorContains(t, err, "-scale (BENCH_SCALE)")
}
