package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/persistence"
)

func TestActionsAreRefusedWithoutTheToken(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		cfg    dashboard.Config
		header map[string]string
		status int
		code   string
	}{
		{"no token configured", dashboard.Config{}, bearer(token), http.StatusForbidden, "actions_disabled"},
		{"read-only", dashboard.Config{Token: token, ReadOnly: true}, bearer(token), http.StatusForbidden, "read_only"},
		{"no header", dashboard.Config{Token: token}, nil, http.StatusUnauthorized, "unauthorized"},
		{"not bearer", dashboard.Config{Token: token}, map[string]string{"Authorization": "Basic " + token}, http.StatusUnauthorized, "unauthorized"},
		{"wrong token", dashboard.Config{Token: token}, bearer(token + "x"), http.StatusForbidden, "forbidden"},
		{"cross-site", dashboard.Config{Token: token}, map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "forbidden"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, c.cfg)
			b.schedule(t, "kept", "billing", time.Hour, "", "")
			for _, action := range []string{"cancel", "deliver", "reschedule", "replay", "delete"} {
				r := b.post(t, "/api/timeouts/kept/"+action, `{"in":"1m"}`, c.header)
				requireError(t, r, c.status, c.code)
				if c.status == http.StatusUnauthorized {
					require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
				}
			}
			got, err := b.manager.Get(context.Background(), "kept")
			require.NoError(t, err, "a refused action changes nothing")
			require.WithinDuration(t, time.Now().Add(time.Hour), got.Due, time.Minute)
		})
	}
}

func TestActionsOnlyByPost(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	b.schedule(t, "kept", "billing", time.Hour, "", "")
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		r := b.do(t, method, "/api/timeouts/kept/cancel", nil, bearer(token))
		requireError(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
		require.Equal(t, http.MethodPost, r.header.Get("Allow"))
	}
	requireError(t, b.post(t, "/api/timeouts/kept", "", bearer(token)), http.StatusMethodNotAllowed, "method_not_allowed")
	requireError(t, b.post(t, "/api/stats", "", bearer(token)), http.StatusMethodNotAllowed, "method_not_allowed")
	requireError(t, b.post(t, "/api/timeouts/kept/explode", "", bearer(token)), http.StatusNotFound, "not_found")
	_, err := b.manager.Get(context.Background(), "kept")
	require.NoError(t, err)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	b.schedule(t, "doomed", "billing", time.Hour, "", "")

	r := b.post(t, "/api/timeouts/doomed/cancel", "", bearer(token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.JSONEq(t, `{"id":"doomed","action":"cancel"}`, r.body)
	_, err := b.manager.Get(context.Background(), "doomed")
	require.ErrorIs(t, err, persistence.ErrNotFound)

	requireError(t, b.post(t, "/api/timeouts/doomed/cancel", "", bearer(token)), http.StatusConflict, "not_pending")
	requireError(t, b.post(t, "/api/timeouts/doomed/reschedule", `{"in":"1m"}`, bearer(token)), http.StatusConflict, "not_pending")
}

func TestRescheduleMovesTheDueTime(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	b.schedule(t, "moved", "billing", time.Hour, "", "")

	r := b.post(t, "/api/timeouts/moved/reschedule", `{"in":"3h"}`, bearer(token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	body := decode[struct {
		Due time.Time `json:"due"`
	}](t, r)
	got, err := b.manager.Get(context.Background(), "moved")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(3*time.Hour), got.Due, time.Minute)
	require.True(t, body.Due.Equal(got.Due), "the answer gives the stored due time")

	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	r = b.post(t, "/api/timeouts/moved/reschedule", `{"at":"`+at.Format(time.RFC3339)+`"}`, bearer(token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	got, err = b.manager.Get(context.Background(), "moved")
	require.NoError(t, err)
	require.True(t, got.Due.Equal(at), "%s != %s", got.Due, at)

	for _, bad := range []string{``, `{}`, `{"in":"1m","at":"2030-01-01T00:00:00Z"}`, `{"in":"-1m"}`, `{"in":"soon"}`,
		`{"at":"tomorrow"}`, `{"at":"10000-01-01T00:00:00Z"}`, `{"in":"1m","x":1}`, `{"in":"1m"}{"in":"2m"}`, `[`, strings.Repeat(" ", 5000) + `{"in":"1m"}`} {
		requireError(t, b.post(t, "/api/timeouts/moved/reschedule", bad, bearer(token)), http.StatusBadRequest, "invalid_request")
	}
	got2, err := b.manager.Get(context.Background(), "moved")
	require.NoError(t, err)
	require.True(t, got2.Due.Equal(at), "a refused reschedule changes nothing")
}

func TestDeliverNowDeliversIt(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	delivered, err := b.pubSub.Subscribe(context.Background(), "billing")
	require.NoError(t, err)
	b.schedule(t, "hurry", "billing", 24*time.Hour, "", "")

	r := b.post(t, "/api/timeouts/hurry/deliver", "", bearer(token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	select {
	case msg := <-delivered:
		msg.Ack()
		require.Equal(t, "hurry", msg.UUID)
		require.Equal(t, "payload of hurry", string(msg.Payload))
	case <-time.After(20 * time.Second):
		t.Fatal("the timeout was not delivered after deliver now")
	}
	require.Eventually(t, func() bool {
		_, err := b.manager.Get(context.Background(), "hurry")
		return errors.Is(err, persistence.ErrNotFound)
	}, 10*time.Second, 20*time.Millisecond)
}
