package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// TestRescheduleListFiltersAndPages: reschedule moves a pending timeout and refuses what is not
// pending; list filters by destination, key and due range, and pages with --after; stats counts
// due and by destination, in text and JSON.
func TestRescheduleListFiltersAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	store, err := sqlite.Open(ctx, sqlite.Config{Path: path, Endpoint: "orders"})
	require.NoError(t, err)
	now := time.Now()
	for i := range 5 {
		dest := "payments"
		if i%2 == 1 {
			dest = "invoices"
		}
		_, err := store.Store(ctx, persistence.Timeout{ID: fmt.Sprintf("t%d", i), Destination: dest, Due: now.Add(time.Duration(i+1) * time.Hour)})
		require.NoError(t, err)
	}
	_, err = store.Schedule(ctx, persistence.Timeout{ID: "keyed", Destination: "payments", Due: now.Add(10 * time.Hour), Key: "order-42/payment"},
		now, persistence.KeyReplace)
	require.NoError(t, err)
	require.NoError(t, store.Close())
	db := []string{"--endpoint", "orders", "--store", "sqlite://" + path}
	cli := func(args ...string) (int, string, string) {
		return timeoutmill(ctx, append(args, db...)...)
	}

	code, stdout, stderr := cli("reschedule", "t4", "--in=-1h") // the past means now
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "rescheduled t4 to ")
	code, stdout, stderr = cli("reschedule", "t0", "--at", now.Add(30*time.Hour).UTC().Format(time.RFC3339Nano))
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr = cli("reschedule", "nope", "--in", "1h")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "not pending: nope")
	require.Contains(t, stderr, "nope was not pending")
	code, _, stderr = cli("reschedule", "t1", "--at", "10000-01-01T00:00:00Z")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "out of range")
	code, _, stderr = cli("reschedule", "t1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--at or --in")

	list := func(args ...string) []string {
		t.Helper()
		code, stdout, stderr := cli(append([]string{"list"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var ids []string
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n")[1:] {
			if !strings.HasPrefix(line, "next page:") {
				ids = append(ids, strings.Fields(line)[0])
			}
		}
		return ids
	}
	require.Equal(t, []string{"t4", "t1", "t2", "t3", "keyed", "t0"}, list(), "earliest due first, t4 now and t0 later")
	require.Equal(t, []string{"t1", "t3"}, list("--destination", "invoices"))
	require.Equal(t, []string{"keyed"}, list("--key", "order-42/payment"))
	require.Equal(t, []string{"t2", "t3"}, list("--due-after", "150m", "--due-before", "4h30m"))

	code, stdout, stderr = cli("list", "--limit", "2", "--json")
	require.Equal(t, 0, code, stderr)
	var page struct {
		Timeouts []struct{ ID, Key string }
		Next     *string
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &page))
	require.Len(t, page.Timeouts, 2)
	require.NotNil(t, page.Next, "a full page names the next")
	var seen []string
	for page.Next != nil {
		for _, to := range page.Timeouts {
			seen = append(seen, to.ID)
		}
		code, stdout, stderr = cli("list", "--limit", "2", "--json", "--after", *page.Next)
		require.Equal(t, 0, code, stderr)
		page.Next = nil
		page.Timeouts = nil
		require.NoError(t, json.Unmarshal([]byte(stdout), &page))
	}
	for _, to := range page.Timeouts {
		seen = append(seen, to.ID)
	}
	require.Equal(t, []string{"t4", "t1", "t2", "t3", "keyed", "t0"}, seen, "pages with --after")

	code, _, stderr = cli("list", "--after", "garbage")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "DUE,ID")

	code, stdout, stderr = cli("stats", "--json")
	require.Equal(t, 0, code, stderr)
	var st struct {
		Pending, DueNow int
		ByDestination   map[string]int `json:"by_destination"`
		DueNowJSON      int            `json:"due_now"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &st))
	require.Equal(t, 6, st.Pending)
	require.Equal(t, 1, st.DueNowJSON, "t4 was rescheduled to now")
	require.Equal(t, map[string]int{"payments": 4, "invoices": 2}, st.ByDestination)
	code, stdout, _ = cli("stats")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "due now:      1")
	require.Regexp(t, `destinations: 4 payments`, stdout)
}
