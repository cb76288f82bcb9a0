package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// TestParkedListReplayDelete parks timeouts in a store as the dispatcher does, and looks at,
// replays and deletes them with the commands.
func TestParkedListReplayDelete(t *testing.T) {
	t.Parallel()
	for name, newStore := range map[string]func(t *testing.T) cliStore{"sqlite": sqliteCLIStore, "postgres": postgresCLIStore} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testParkedCommands(t, newStore(t))
		})
	}
}

func testParkedCommands(t *testing.T, s cliStore) {
	ctx := t.Context()
	flags := []string{"--endpoint", s.endpoint, "--store", s.dsn}
	store, err := connect.OpenStore(ctx, s.dsn, s.endpoint)
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	require.NoError(t, store.(persistence.Installer).SetupInfrastructure(ctx))
	parker := store.(persistence.Parker)

	due := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for i := range 5 {
		id := fmt.Sprintf("big-%d", i)
		_, err := store.Store(ctx, persistence.Timeout{ID: id, Destination: "billing", Due: due.Add(time.Duration(i) * time.Second), Payload: []byte("x")})
		require.NoError(t, err)
		ok, err := parker.Park(ctx, id, "forwarding to \"billing\" failed after 1 attempt: too large;\nthe error queue \"error\" refused its copy too: too large")
		require.NoError(t, err)
		require.True(t, ok)
	}
	_, err = store.Store(ctx, persistence.Timeout{ID: "ordinary", Destination: "billing", Due: due, Payload: []byte("y")})
	require.NoError(t, err)

	code, stdout, stderr := timeoutmill(ctx, append([]string{"stats"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "pending:      6")
	require.Contains(t, stdout, "parked:       5 (timeoutmill parked list)")
	code, stdout, stderr = timeoutmill(ctx, append([]string{"stats", "--json"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"parked":5`)

	// A table, one line per timeout however many lines its reason has, paged like list.
	code, stdout, stderr = timeoutmill(ctx, append([]string{"parked", "list", "--limit", "3"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 5, stdout)
	require.Regexp(t, `^ID\s+DUE\s+DESTINATION\s+FAILURES\s+REASON$`, lines[0])
	require.Regexp(t, `^big-0\s+\S+\s+billing\s+0\s+forwarding to "billing" failed after 1 attempt: too large; the error queue "error" refused its copy too: too large$`, lines[1])
	require.NotContains(t, stdout, "ordinary", "only parked ones")
	require.True(t, strings.HasPrefix(lines[4], "next page: --after "), lines[4])
	after := strings.TrimPrefix(lines[4], "next page: --after ")
	code, stdout, stderr = timeoutmill(ctx, append([]string{"parked", "list", "--json", "--limit", "3", "--after", after}, flags...)...)
	require.Equal(t, 0, code, stderr)
	var page struct {
		Timeouts []struct {
			ID     string `json:"id"`
			Parked bool   `json:"parked"`
			Reason string `json:"reason"`
		} `json:"timeouts"`
		Next *string `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
	require.Len(t, page.Timeouts, 2)
	require.Equal(t, "big-3", page.Timeouts[0].ID)
	require.True(t, page.Timeouts[0].Parked)
	require.Contains(t, page.Timeouts[0].Reason, "refused its copy too")
	require.Nil(t, page.Next)

	// Replay by id: a pending or unknown id is reported, and the exit code says so.
	code, stdout, stderr = timeoutmill(ctx, append([]string{"parked", "replay", "big-0", "ordinary", "nope"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "replayed big-0")
	require.Contains(t, stdout, "not parked: ordinary (pending, not parked)")
	require.Contains(t, stdout, "not parked: nope (not stored")
	require.Contains(t, stderr, "2 of 3 ids were not parked")
	got, err := store.Peek(ctx, "big-0")
	require.NoError(t, err)
	require.Empty(t, got.Parked, "pending again")

	// Delete by id deletes parked ones only.
	code, stdout, stderr = timeoutmill(ctx, append([]string{"parked", "delete", "big-1", "big-0", "ordinary"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "deleted big-1")
	require.Contains(t, stdout, "not parked, not deleted: big-0 (pending, not parked)")
	require.Contains(t, stdout, "not parked, not deleted: ordinary (pending, not parked)")
	require.Contains(t, stderr, "2 of 3 ids were not parked")
	for _, id := range []string{"big-0", "ordinary"} {
		_, err := store.Peek(ctx, id)
		require.NoError(t, err, "%s is kept", id)
	}

	// --all: replay one, delete the rest.
	code, stdout, stderr = timeoutmill(ctx, append([]string{"parked", "replay", "big-2"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "replayed big-2\n", stdout)
	code, stdout, stderr = timeoutmill(ctx, append([]string{"parked", "delete", "--all"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "deleted 2 parked timeouts\n", stdout)
	code, stdout, stderr = timeoutmill(ctx, append([]string{"parked", "replay", "--all"}, flags...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "replayed 0 parked timeouts\n", stdout)
	st, err := store.(persistence.Inspector).Stats(ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, 3, st.Pending, "big-0, big-2 and ordinary")
	require.Zero(t, st.Parked)

	code, _, stderr = timeoutmill(ctx, append([]string{"parked", "replay"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "give either timeout ids or --all")
	code, _, stderr = timeoutmill(ctx, append([]string{"parked", "delete", "x", "--all"}, flags...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "give either timeout ids or --all")
}
