package dashboard_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// park schedules a timeout due in an hour and parks it with reason, as the dispatcher does.
func (b *testBundle) park(t *testing.T, id, reason string) {
	t.Helper()
	b.schedule(t, id, "billing", time.Hour, "", "")
	ok, err := b.store.Park(context.Background(), id, reason)
	require.NoError(t, err)
	require.True(t, ok)
}

const refusal = `forwarding to "billing" failed after 1 attempt: PRECONDITION_FAILED - message size 67108864 is larger than configured max size 16777216; the error queue "error" refused its copy too: <b>same</b>`

func TestParkedTimeoutsAreCountedListedAndShownWithTheirReason(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	b.park(t, "big-1", refusal)
	b.schedule(t, "ordinary", "billing", 2*time.Hour, "", "")

	r := b.get(t, "/api/stats")
	require.Equal(t, http.StatusOK, r.status, r.body)
	stats := decode[struct {
		Pending int `json:"pending"`
		Parked  int `json:"parked"`
	}](t, r)
	require.Equal(t, 2, stats.Pending)
	require.Equal(t, 1, stats.Parked)

	type parkedList struct {
		Timeouts []struct {
			ID           string `json:"id"`
			ParkedReason string `json:"parked_reason"`
		} `json:"timeouts"`
	}
	r = b.get(t, "/api/timeouts?parked=true")
	require.Equal(t, http.StatusOK, r.status, r.body)
	list := decode[parkedList](t, r)
	require.Len(t, list.Timeouts, 1)
	require.Equal(t, "big-1", list.Timeouts[0].ID)
	require.Equal(t, refusal, list.Timeouts[0].ParkedReason)
	r = b.get(t, "/api/timeouts?parked=false")
	require.Len(t, decode[parkedList](t, r).Timeouts, 2, "parked=false is no filter")

	for _, page := range []string{"/", "/?parked=true", "/timeouts/big-1"} {
		r := b.get(t, page)
		require.Equal(t, http.StatusOK, r.status, page)
		require.Contains(t, r.body, "PRECONDITION_FAILED - message size 67108864", page)
		require.NotContains(t, r.body, "<b>same</b>", "%s: the reason is escaped", page)
		require.Contains(t, r.body, `data-action="replay" data-id="big-1"`, page)
		require.Contains(t, r.body, `data-action="delete" data-id="big-1"`, page)
	}
	overview := b.get(t, "/")
	require.Contains(t, overview.body, `href="./?parked=true#timeouts">1</a>`, "the parked count links to the list")
	require.Contains(t, b.get(t, "/?parked=true").body, `name="parked" value="true" checked`)
	require.NotContains(t, b.get(t, "/?parked=true").body, `data-id="ordinary"`, "only parked ones")
}

func TestReplayAndDeleteActOnParkedTimeoutsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	b.park(t, "big-1", refusal)
	b.park(t, "big-2", refusal)
	b.schedule(t, "ordinary", "billing", 2*time.Hour, "", "")
	ctx := context.Background()

	r := b.post(t, "/api/timeouts/big-1/replay", "", bearer(token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.JSONEq(t, `{"id":"big-1","action":"replay"}`, r.body)
	got, err := b.manager.Get(ctx, "big-1")
	require.NoError(t, err)
	require.Empty(t, got.Parked, "pending again")
	requireError(t, b.post(t, "/api/timeouts/big-1/replay", "", bearer(token)), http.StatusConflict, "not_parked")

	r = b.post(t, "/api/timeouts/big-2/delete", "", bearer(token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.JSONEq(t, `{"id":"big-2","action":"delete"}`, r.body)
	_, err = b.manager.Get(ctx, "big-2")
	require.ErrorIs(t, err, persistence.ErrNotFound)

	for _, id := range []string{"ordinary", "big-2", "never-stored"} {
		requireError(t, b.post(t, "/api/timeouts/"+id+"/delete", "", bearer(token)), http.StatusConflict, "not_parked")
	}
	_, err = b.manager.Get(ctx, "ordinary")
	require.NoError(t, err, "delete leaves a timeout that is not parked alone")
}

func TestReadOnlyDashboardRefusesReplayAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token, ReadOnly: true})
	b.park(t, "big-1", refusal)
	for _, action := range []string{"replay", "delete"} {
		requireError(t, b.post(t, "/api/timeouts/big-1/"+action, "", bearer(token)), http.StatusForbidden, "read_only")
	}
	got, err := b.manager.Get(context.Background(), "big-1")
	require.NoError(t, err)
	require.Equal(t, refusal, got.Parked, "still parked")
	require.NotContains(t, b.get(t, "/?parked=true").body, `data-action="replay"`, "no buttons in read-only mode")
}
