package dashboard_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dashboard"
)

// TestHostileInputIsRefusedAndNeverReflected sends what an attacker or a confused script might:
// over-long ids, invalid UTF-8, control characters, unknown or repeated parameters, forged cursors.
// Each gets a 400 with a stable error body on the API and an error page elsewhere, and neither
// repeats the input.
func TestHostileInputIsRefusedAndNeverReflected(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	b.schedule(t, "kept", "billing", time.Hour, "owner-1", "")

	huge := strings.Repeat("A", 1<<20)
	longCursor := base64.RawURLEncoding.EncodeToString([]byte("100." + strings.Repeat("C", 300)))
	long := strings.Repeat("B", 251)
	cases := []struct {
		name, query, marker string
	}{
		{"1 MB id", "id=" + huge, huge[:300]},
		{"long owner", "owner=" + long, long},
		{"invalid UTF-8", "owner=%ff%fe<b>x", "<b>x"},
		{"control character", "key=a%00<script>alert(1)</script>", "<script>alert(1)</script>"},
		{"newline", "destination=a%0d%0aSet-Cookie:x", "Set-Cookie:x"},
		{"unknown parameter", "<img src=x onerror=alert(1)>=1", "<img src=x onerror=alert(1)>"},
		{"repeated parameter", "owner=a&owner=<i>b</i>", "<i>b</i>"},
		{"bad escape", "owner=%zz<u>q</u>", "<u>q</u>"},
		{"forged cursor", "after=" + url.QueryEscape("<svg onload=alert(1)>"), "<svg onload=alert(1)>"},
		{"cursor with a long id", "after=" + longCursor, longCursor},
		{"limit too large", "limit=100000000000000000000", "100000000000000000000"},
		{"limit not a number", "limit=1;DROP TABLE timeouts", "DROP TABLE"},
		{"bad time", "due_from=<b>now</b>", "<b>now</b>"},
		{"parked not a boolean", "parked=<b>yes</b>", "<b>yes</b>"},
	}
	for _, c := range cases {
		for _, path := range []string{"/api/timeouts", "/"} {
			r := b.get(t, path+"?"+c.query)
			require.Equal(t, http.StatusBadRequest, r.status, "%s %s: %.300s", c.name, path, r.body)
			require.NotContains(t, r.body, c.marker, "%s %s reflects the input", c.name, path)
			if path == "/api/timeouts" {
				requireError(t, r, http.StatusBadRequest, "invalid_request")
			} else {
				require.Contains(t, r.header.Get("Content-Type"), "text/html")
			}
		}
	}

	for _, id := range []string{huge, long, "%ff%fe", "a%00b", "a%0Ab"} {
		for _, path := range []string{"/api/timeouts/" + id, "/timeouts/" + id} {
			r := b.get(t, path)
			require.Equal(t, http.StatusBadRequest, r.status, "%.80s: %.300s", path, r.body)
			require.NotContains(t, r.body, "BBBBBBBB")
		}
		for _, action := range []string{"cancel", "replay", "delete"} {
			r := b.post(t, "/api/timeouts/"+id+"/"+action, "", bearer(token))
			requireError(t, r, http.StatusBadRequest, "invalid_request")
		}
	}
	_, err := b.manager.Get(t.Context(), "kept")
	require.NoError(t, err, "nothing hostile touched the store")
}

// TestInjectionTextIsDataEscapedOnOutput shows that text which is valid in a filter, SQL or HTML
// included, is only ever a value: it matches what it equals and is escaped wherever it is shown.
func TestInjectionTextIsDataEscapedOnOutput(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	script := `<script>alert("x")</script>`
	b.schedule(t, `id-"><img src=x onerror=alert(1)>`, "billing", time.Hour, script, `k'); DROP TABLE timeouts;--`)
	b.schedule(t, "plain", "billing", 2*time.Hour, "someone", "")

	for _, sql := range []string{`' OR '1'='1`, `x'; DROP TABLE timeouts; --`, `%`, `_`} {
		r := b.get(t, "/api/timeouts?owner="+url.QueryEscape(sql))
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Empty(t, decode[listBody](t, r).Timeouts, "%q matches nothing: it is a value, not SQL or a pattern", sql)
	}
	r := b.get(t, "/api/timeouts?owner="+url.QueryEscape(script))
	require.Len(t, decode[listBody](t, r).Timeouts, 1)
	require.NotContains(t, r.body, "<script>", "JSON escapes < and >")

	for _, page := range []string{"/", "/?owner=" + url.QueryEscape(script), "/timeouts/" + url.PathEscape(`id-"><img src=x onerror=alert(1)>`)} {
		r := b.get(t, page)
		require.Equal(t, http.StatusOK, r.status, page)
		require.NotContains(t, r.body, script, page)
		require.NotContains(t, r.body, `<img src=x`, page)
		require.Contains(t, r.body, "&lt;script&gt;", page)
	}
	stats := b.get(t, "/api/stats")
	require.NotContains(t, stats.body, "<script>")
	_, err := b.manager.Get(t.Context(), "plain")
	require.NoError(t, err)
}
