package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

const token = "test-token-0123456789"

type testBundle struct {
	manager *timeouts.Manager
	store   parkerStore
	pubSub  *gochannel.GoChannel
	handler http.Handler
}

// parkerStore is the memory store as the persistence.Parker it is.
type parkerStore interface {
	persistence.Store
	persistence.Parker
}

// setup runs a manager on the memory store and GoChannel, and its dashboard with config.
func setup(t *testing.T, config dashboard.Config) *testBundle {
	t.Helper()
	return setupOn(t, config, memory.New().(parkerStore), nil)
}

// setupOn is setup on store, with the manager's configuration adjusted by mutate.
func setupOn(t *testing.T, config dashboard.Config, store parkerStore, mutate func(*timeouts.Config)) *testBundle {
	t.Helper()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, logger)
	cfg := timeouts.Config{Endpoint: "orders", Store: store, Publisher: pubSub, Subscriber: pubSub}
	if mutate != nil {
		mutate(&cfg)
	}
	manager, err := timeouts.NewManager(cfg, logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	require.NoError(t, err)
	require.NoError(t, manager.AddToRouter(router))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = router.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		<-manager.Done()
		_ = pubSub.Close()
	})
	<-manager.Ready()
	h, err := dashboard.New(manager, config)
	require.NoError(t, err)
	return &testBundle{manager: manager, store: store, pubSub: pubSub, handler: h}
}

// schedule stores a timeout for topic due after d, with owner and key when not empty.
func (b *testBundle) schedule(t *testing.T, id, topic string, d time.Duration, owner, key string) {
	t.Helper()
	msg := message.NewMessage(id, []byte("payload of "+id))
	msg.Metadata.Set("trace", "abc")
	timeouts.DeliverAt(msg, time.Now().Add(d))
	if owner != "" {
		timeouts.WithOwner(msg, owner)
	}
	if key != "" {
		timeouts.WithKey(msg, key, persistence.KeyReplace)
	}
	_, err := b.manager.Schedule(context.Background(), topic, msg)
	require.NoError(t, err)
}

type response struct {
	status int
	header http.Header
	body   string
}

func (b *testBundle) do(t *testing.T, method, target string, body io.Reader, header map[string]string) response {
	t.Helper()
	req := httptest.NewRequest(method, "http://dashboard.test/", body)
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = "", "", ""
	u, err := req.URL.Parse(target)
	require.NoError(t, err)
	req.URL = u
	req.RequestURI = ""
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

func (b *testBundle) get(t *testing.T, target string) response {
	t.Helper()
	return b.do(t, http.MethodGet, target, nil, nil)
}

func (b *testBundle) post(t *testing.T, target, body string, header map[string]string) response {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return b.do(t, http.MethodPost, target, r, header)
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.body), &v), r.body)
	return v
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func requireError(t *testing.T, r response, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status, r.body)
	require.Equal(t, code, decode[errorBody](t, r).Error.Code, r.body)
}

// named is a count by name in api/stats.
type named struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

type statsBody struct {
	Endpoint string `json:"endpoint"`
	Pending  int    `json:"pending"`
	DueNow   int    `json:"due_now"`
	Due      []struct {
		Label   string `json:"label"`
		Count   int    `json:"count"`
		Exact   bool   `json:"exact"`
		AtLeast bool   `json:"at_least"`
		AtMost  bool   `json:"at_most"`
	} `json:"due"`
	DueHistogram []struct {
		Label   string `json:"label"`
		Count   int    `json:"count"`
		Exact   bool   `json:"exact"`
		AtLeast bool   `json:"at_least"`
		AtMost  bool   `json:"at_most"`
	} `json:"due_histogram"`
	ByDestination []struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	} `json:"by_destination"`
	ByOwner struct {
		Exact    bool    `json:"exact"`
		Complete bool    `json:"complete"`
		Owners   []named `json:"owners"`
		NoOwner  int     `json:"no_owner"`
	} `json:"by_owner"`
	Failing       int     `json:"failing_in_sample"`
	OldestOverdue float64 `json:"oldest_overdue_seconds"`
	Dispatch      struct {
		Dispatched uint64 `json:"dispatched"`
		Early      uint64 `json:"early"`
		Lateness   []struct {
			UpTo  float64 `json:"up_to_seconds"`
			Count uint64  `json:"count"`
		} `json:"lateness"`
	} `json:"dispatch"`
	Breakers []struct {
		Name  string `json:"name"`
		Armed bool   `json:"armed"`
	} `json:"breakers"`
	Clock struct {
		Measured bool       `json:"measured"`
		Offset   float64    `json:"offset_seconds"`
		Error    float64    `json:"error_seconds"`
		At       *time.Time `json:"measured_at"`
		Alarm    bool       `json:"alarm"`
	} `json:"clock"`
	Sampled int  `json:"sampled"`
	Partial bool `json:"sample_partial"`
}

type listBody struct {
	Timeouts []struct {
		ID           string            `json:"id"`
		Destination  string            `json:"destination"`
		Due          time.Time         `json:"due"`
		Owner        string            `json:"owner"`
		Key          string            `json:"key"`
		Metadata     map[string]string `json:"metadata"`
		PayloadText  *string           `json:"payload_text"`
		PayloadBytes *int              `json:"payload_bytes"`
	} `json:"timeouts"`
	Next string `json:"next"`
}

// scheduleSpread stores timeouts due in each window of the overview.
func scheduleSpread(t *testing.T, b *testBundle) {
	t.Helper()
	b.schedule(t, "in-30s-a", "billing", 30*time.Second, "order-1", "")
	b.schedule(t, "in-30s-b", "billing", 30*time.Second, "order-2", "")
	b.schedule(t, "in-10m", "shipping", 10*time.Minute, "order-1", "")
	b.schedule(t, "in-2h", "shipping", 2*time.Hour, "", "k-2h")
	b.schedule(t, "in-3d-a", "reminders", 72*time.Hour, "order-3", "")
	b.schedule(t, "in-3d-b", "reminders", 72*time.Hour, "order-3", "")
}

func TestStatsCountPendingByWindowDestinationAndOwner(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	scheduleSpread(t, b)

	r := b.get(t, "/api/stats")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.header.Get("Content-Type"), "application/json")
	st := decode[statsBody](t, r)
	require.Equal(t, "orders", st.Endpoint)
	require.Equal(t, 6, st.Pending)
	require.Zero(t, st.DueNow)
	require.Zero(t, st.OldestOverdue)
	windows := map[string]int{}
	for _, w := range st.Due {
		require.False(t, w.AtLeast || w.AtMost, "a complete sample gives exact counts: %+v", w)
		windows[w.Label] = w.Count
	}
	require.Equal(t, map[string]int{"due now": 0, "next minute": 2, "next hour": 1, "next day": 1, "later": 2}, windows)
	require.Equal(t, "billing", st.ByDestination[0].Name)
	require.Len(t, st.ByDestination, 3)
	require.True(t, st.ByOwner.Complete)
	require.Equal(t, 1, st.ByOwner.NoOwner)
	require.Equal(t, "order-1", st.ByOwner.Owners[0].Name)
	require.Equal(t, 2, st.ByOwner.Owners[0].Count)
	require.Len(t, st.Breakers, 3)
	require.NotEmpty(t, st.Dispatch.Lateness)
}

func TestStatsShowLateness(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	delivered, err := b.pubSub.Subscribe(context.Background(), "soon")
	require.NoError(t, err)
	b.schedule(t, "soon-1", "soon", 20*time.Millisecond, "", "")
	select {
	case msg := <-delivered:
		msg.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("soon-1 was not delivered")
	}
	require.Eventually(t, func() bool {
		return decode[statsBody](t, b.get(t, "/api/stats")).Dispatch.Dispatched == 1
	}, 10*time.Second, 20*time.Millisecond)
	st := decode[statsBody](t, b.get(t, "/api/stats"))
	var inBuckets uint64
	for _, l := range st.Dispatch.Lateness {
		inBuckets += l.Count
	}
	require.Equal(t, uint64(1), inBuckets)
	require.Zero(t, st.Dispatch.Early)
}

func TestStatsShowTheOldestOverdue(t *testing.T) {
	t.Parallel()
	// A manager that never runs: its overdue timeouts stay so, as behind a stopped poller.
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	store := memory.New().(parkerStore)
	manager, err := timeouts.NewManager(timeouts.Config{Endpoint: "idle", Store: store, Publisher: pubSub, Subscriber: pubSub}, watermill.NopLogger{})
	require.NoError(t, err)
	for id, due := range map[string]time.Duration{"late-90s": -90 * time.Second, "late-10s": -10 * time.Second, "soon": time.Minute} {
		_, err := store.Store(context.Background(), persistence.Timeout{ID: id, Destination: "x", Due: time.Now().Add(due)})
		require.NoError(t, err)
	}
	h, err := dashboard.New(manager, dashboard.Config{})
	require.NoError(t, err)
	b := &testBundle{manager: manager, store: store, handler: h}

	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.Equal(t, 3, st.Pending)
	require.Equal(t, 2, st.DueNow)
	require.GreaterOrEqual(t, st.OldestOverdue, 90.0)
	require.Less(t, st.OldestOverdue, 3600.0)
	page := b.get(t, "/")
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "overdue 1m")
}

// sampledStore is the memory store without persistence.DueCounter: the dashboard estimates its
// windows from the sample, as on a store that cannot count them.
type sampledStore struct {
	parkerStore
	persistence.Inspector
	persistence.Scheduler
}

func TestSampleBeyondItsEndGivesBounds(t *testing.T) {
	t.Parallel()
	store := memory.New().(parkerStore)
	b := setupOn(t, dashboard.Config{SampleSize: 3}, sampledStore{store, store.(persistence.Inspector), store.(persistence.Scheduler)}, nil)
	scheduleSpread(t, b)

	st := decode[statsBody](t, b.get(t, "/api/stats"))
	require.True(t, st.Partial)
	require.Equal(t, 3, st.Sampled)
	require.False(t, st.ByOwner.Complete)
	got := map[string][4]any{}
	for _, w := range st.Due {
		got[w.Label] = [4]any{w.Count, w.Exact, w.AtLeast, w.AtMost}
	}
	// The sample holds the three earliest (30s, 30s, 10m): the minute is exact, the hour reaches
	// beyond the 10m one, so it and what follows are bounds.
	require.Equal(t, [4]any{0, true, false, false}, got["due now"])
	require.Equal(t, [4]any{2, true, false, false}, got["next minute"])
	require.Equal(t, [4]any{1, false, true, false}, got["next hour"])
	require.Equal(t, [4]any{0, false, true, false}, got["next day"])
	require.Equal(t, [4]any{3, false, false, true}, got["later"])
	page := b.get(t, "/")
	require.Equal(t, "≥0", card(t, page.body, "next day"))
	require.Equal(t, "≤3", card(t, page.body, "later"))
	require.Equal(t, "2", card(t, page.body, "next minute"))
}

func TestListPagesByKeysetWithoutGapsOrRepeats(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	for i := range 25 {
		b.schedule(t, fmt.Sprintf("t-%02d", i), "billing", time.Hour+time.Duration(i%5)*time.Second, "", "")
	}
	var seen []string
	target := "/api/timeouts?limit=10"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		r := b.get(t, target)
		require.Equal(t, http.StatusOK, r.status, r.body)
		page := decode[listBody](t, r)
		for _, tm := range page.Timeouts {
			seen = append(seen, tm.ID)
			require.Nil(t, tm.PayloadText, "a list carries no payload")
		}
		if page.Next == "" {
			break
		}
		target = "/api/timeouts?limit=10&after=" + page.Next
		if pages == 0 { // a timeout that comes while paging, due before the cursor, is not listed again
			b.schedule(t, "t-early", "billing", time.Minute, "", "")
		}
	}
	require.Len(t, seen, 25)
	unique := map[string]bool{}
	for _, id := range seen {
		unique[id] = true
	}
	require.Len(t, unique, 25)
	require.Equal(t, "t-00", seen[0])
}

func TestFindByIDOwnerKeyAndDestination(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	scheduleSpread(t, b)

	ids := func(target string) []string {
		r := b.get(t, target)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var out []string
		for _, tm := range decode[listBody](t, r).Timeouts {
			out = append(out, tm.ID)
		}
		return out
	}
	require.Equal(t, []string{"in-30s-a", "in-10m"}, ids("/api/timeouts?owner=order-1"))
	require.Equal(t, []string{"in-2h"}, ids("/api/timeouts?key=k-2h"))
	require.Equal(t, []string{"in-3d-a", "in-3d-b"}, ids("/api/timeouts?destination=reminders"))
	require.Equal(t, []string{"in-10m"}, ids("/api/timeouts?id=in-10m"))
	require.Empty(t, ids("/api/timeouts?id=nothing"))
	require.Equal(t, []string{"in-3d-a"}, ids("/api/timeouts?owner=order-3&limit=1"))

	r := b.get(t, "/api/timeouts/in-2h")
	require.Equal(t, http.StatusOK, r.status, r.body)
	one := decode[listBody](t, response{body: `{"timeouts":[` + r.body + `]}`}).Timeouts[0]
	require.Equal(t, "payload of in-2h", *one.PayloadText)
	require.Equal(t, "abc", one.Metadata["trace"])
	requireError(t, b.get(t, "/api/timeouts/nothing"), http.StatusNotFound, "not_found")

	page := b.get(t, "/?owner=order-1")
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "in-30s-a")
	require.NotContains(t, page.body, "in-3d-a")
	detail := b.get(t, "/timeouts/in-2h")
	require.Equal(t, http.StatusOK, detail.status)
	require.Contains(t, detail.body, "payload of in-2h")
	require.Contains(t, detail.body, "k-2h")
}

func TestOverviewPageRendersCountsAndPlots(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Token: token})
	scheduleSpread(t, b)

	r := b.get(t, "/")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.header.Get("Content-Type"), "text/html")
	require.Contains(t, r.header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Equal(t, "DENY", r.header.Get("X-Frame-Options"))
	for _, want := range []string{"Pending by due time", "Delivery lateness", "<svg", "By destination", "By owner",
		"fetch breaker", "data-action=\"cancel\"", "in-3d-b", "static/app.js"} {
		require.Contains(t, r.body, want)
	}
	require.NotContains(t, r.body, token, "the token is never in a page")
	for _, asset := range []string{"/static/app.js", "/static/style.css"} {
		require.Equal(t, http.StatusOK, b.get(t, asset).status, asset)
	}
	requireNotFoundPage := b.get(t, "/nothing/here")
	require.Equal(t, http.StatusNotFound, requireNotFoundPage.status)
}

func TestReadOnlyAndTokenlessPagesHaveNoActionButtons(t *testing.T) {
	t.Parallel()
	for _, cfg := range []dashboard.Config{{}, {Token: token, ReadOnly: true}} {
		b := setup(t, cfg)
		b.schedule(t, "one", "billing", time.Hour, "", "")
		r := b.get(t, "/")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, "one")
		require.NotContains(t, r.body, "data-action=")
	}
}

func TestMountedUnderAPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	b.schedule(t, "one/with slash", "billing", time.Hour, "", "")
	mux := http.NewServeMux()
	mux.Handle("/ops/timeouts/", http.StripPrefix("/ops/timeouts", b.handler))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	get := func(path string) (int, string) {
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	status, body := get("/ops/timeouts/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `href="./timeouts/one%2Fwith%20slash"`)
	status, body = get("/ops/timeouts/timeouts/one%2Fwith%20slash")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `href="../static/style.css"`)
	status, _ = get("/ops/timeouts/static/style.css")
	require.Equal(t, http.StatusOK, status)
	status, body = get("/ops/timeouts/api/timeouts/one%2Fwith%20slash")
	require.Equal(t, http.StatusOK, status, body)
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	for _, cfg := range []dashboard.Config{{Token: "short"}, {Token: "has a space in it, sixteen+"}, {SampleSize: -1}, {SampleSize: 10_001}} {
		_, err := dashboard.New(b.manager, cfg)
		require.ErrorIs(t, err, dashboard.ErrInvalidConfig, "%+v", cfg)
	}
	_, err := dashboard.New(nil, dashboard.Config{})
	require.ErrorIs(t, err, dashboard.ErrInvalidConfig)
}
