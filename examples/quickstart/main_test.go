package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
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
	require.NoError(t, quickStart.run(ctx, &out), out.String())
	t.Log("\n" + out.String())
	requireTrue(t, out.String(), quickStart)
}

// The quick start's stop lands on a due time: the reminder whose arrival stops the first run
// is still being settled, and with some plans another one falls due at that very moment. Run
// many times, on a faster clock, every transcript must say only what is true: each reminder
// delivered once as new, a second delivery said to be one, and "all delivered" only when all
// were.
func TestQuickstartTellsTheTruthWhenTheStopLandsOnADueTime(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	plans := []plan{
		{delays: ms(50, 100, 150, 200, 400, 500), stopAfter: 4},  // the quick start, faster
		{delays: ms(50, 100, 150, 200, 200, 500), stopAfter: 4},  // the fifth is due as the fourth stops the run
		{delays: ms(100, 100, 100, 300, 300, 300), stopAfter: 2}, // the stop lands among reminders due together
		{delays: ms(100, 200, 300, 400, 500, 600), stopAfter: 1},
		{delays: ms(100, 200, 300, 400, 500, 500), stopAfter: 5},
	}
	const runsEach = 6
	again := 0
	for i, p := range plans {
		for r := range runsEach {
			t.Run(fmt.Sprintf("plan%d/run%d", i, r), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var out bytes.Buffer
				require.NoError(t, p.run(ctx, &out), out.String())
				requireTrue(t, out.String(), p)
				if strings.Contains(out.String(), "again (at least once)") {
					again++
					t.Log("\n" + out.String())
				}
			})
		}
	}
	t.Logf("%d of %d runs had a reminder delivered twice", again, len(plans)*runsEach)
}

var (
	deliveredLine = regexp.MustCompile(`^delivered "(reminder \d+)", \d+ ms after due$`)
	againLine     = regexp.MustCompile(`^"(reminder \d+)" again \(at least once\), \d+ ms after due$`)
	stoppedLine   = regexp.MustCompile(`^stopped after [\d.]+ s: (\d+) of (\d+) reminders received, (\d+) timeouts still in the store$`)
	allLine       = regexp.MustCompile(`^all (\d+) reminders delivered, none early, in [\d.]+ s(?:; (\d+) delivered again \(at least once\))?$`)
)

// requireTrue checks a transcript of p's run against itself: every claim it makes is borne out
// by the deliveries it printed, one line each.
func requireTrue(t *testing.T, text string, p plan) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	delivered := map[string]bool{}
	again := 0
	restarted, stopped, finished := false, false, false
	for _, line := range lines {
		require.False(t, finished, "nothing after the last line: %q\n%s", line, text)
		switch {
		case deliveredLine.MatchString(line):
			name := deliveredLine.FindStringSubmatch(line)[1]
			require.False(t, delivered[name], "%s printed as new twice\n%s", name, text)
			delivered[name] = true
		case againLine.MatchString(line):
			name := againLine.FindStringSubmatch(line)[1]
			require.True(t, delivered[name], "%s said to come again before it came\n%s", name, text)
			again++
		case stoppedLine.MatchString(line):
			m := stoppedLine.FindStringSubmatch(line)
			require.Equal(t, strconv.Itoa(len(delivered)), m[1], "received before the stop\n%s", text)
			require.Equal(t, strconv.Itoa(len(p.delays)), m[2])
			require.GreaterOrEqual(t, len(delivered), p.stopAfter, "stopped early\n%s", text)
			pending, _ := strconv.Atoi(m[3])
			require.GreaterOrEqual(t, pending, len(p.delays)-len(delivered), "a reminder not received must still be stored\n%s", text)
			stopped = true
		case line == "restarted on the same store":
			require.True(t, stopped)
			restarted = true
		case allLine.MatchString(line):
			m := allLine.FindStringSubmatch(line)
			require.True(t, restarted)
			require.Equal(t, strconv.Itoa(len(p.delays)), m[1])
			require.Len(t, delivered, len(p.delays), "\"all delivered\" with some missing\n%s", text)
			for i := range p.delays {
				require.True(t, delivered[fmt.Sprintf("reminder %d", i+1)], "reminder %d never came\n%s", i+1, text)
			}
			if again == 0 {
				require.Empty(t, m[2], "no duplicate was printed\n%s", text)
			} else {
				require.Equal(t, strconv.Itoa(again), m[2], "duplicates counted as printed\n%s", text)
			}
			finished = true
		case strings.HasPrefix(line, "store: "), strings.HasPrefix(line, "scheduled \"reminder "):
		default:
			t.Fatalf("unexpected line %q\n%s", line, text)
		}
	}
	require.True(t, finished, "the run ended without its last line\n%s", text)
}
