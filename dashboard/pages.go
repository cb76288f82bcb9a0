package dashboard

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// pageData is what every page's template gets. Base is the relative path to the dashboard's
// root, so that it works mounted at any prefix.
type pageData struct {
	Base     string
	Endpoint string
	Title    string
	Actions  bool
	ReadOnly bool
	Now      time.Time
}

type overviewData struct {
	pageData
	O             overview
	Q             query
	Rows          []row
	NextURL       string
	FirstURL      string
	Paged         bool
	DueChart      chart
	LatenessChart chart
	MaxDest       int
	MaxOwner      int
}

type timeoutData struct {
	pageData
	T       row
	Meta    []namedValue
	Payload string
	Binary  bool
	Cut     bool
	Size    int
}

type namedValue struct{ Name, Value string }

// actionButtons is what the "actions" template gets: the buttons of one timeout, if On; a
// parked one's are replay and delete.
type actionButtons struct {
	On     bool
	ID     string
	Parked bool
}

// row is a timeout as the pages show it.
type row struct {
	ID, Href, Destination, Owner, Key string
	Due                               time.Time
	DueText, Relative                 string
	Overdue                           bool
	Failures                          int
	Parked                            string // why it was parked; "" when it is not
}

func toRow(base string, t persistence.Timeout, now time.Time) row {
	d := t.Due.Sub(now)
	rel := "in " + human(d)
	if d <= 0 {
		rel = "overdue " + human(-d)
	}
	return row{
		ID: t.ID, Href: base + "timeouts/" + url.PathEscape(t.ID), Destination: t.Destination, Owner: t.Owner, Key: t.Key,
		Due: t.Due.UTC(), DueText: t.Due.UTC().Format("2006-01-02 15:04:05.000"), Relative: rel, Overdue: d <= 0,
		Failures: t.FailureCount, Parked: t.Parked,
	}
}

func (s *server) page(base, title string) pageData {
	return pageData{Base: base, Endpoint: s.m.Activity().Endpoint, Title: title, Actions: s.actionsEnabled(),
		ReadOnly: s.cfg.ReadOnly, Now: time.Now().UTC()}
}

// overviewPage is GET /: the counts, the plots and the search with its page of results.
func (s *server) overviewPage(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.overview(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list, next, err := s.list(r, q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := overviewData{pageData: s.page("./", "Timeouts"), O: o, Q: q, Paged: q.After.ID != ""}
	for _, t := range list {
		d.Rows = append(d.Rows, toRow("./", t, o.Now))
	}
	v := q.values()
	d.FirstURL = "./?" + v.Encode() + "#timeouts"
	if next != "" {
		v.Set("after", next)
		d.NextURL = "./?" + v.Encode() + "#timeouts"
	}
	d.DueChart = dueChart(o.DueHistogram)
	d.LatenessChart = latenessChart(o.Dispatch.Lateness)
	for _, c := range o.ByDestination {
		d.MaxDest = max(d.MaxDest, c.Count)
	}
	for _, c := range o.ByOwner.Owners {
		d.MaxOwner = max(d.MaxOwner, c.Count)
	}
	if len(d.O.ByDestination) > 12 {
		d.O.ByDestination = d.O.ByDestination[:12]
	}
	if len(d.O.ByOwner.Owners) > 12 {
		d.O.ByOwner.Owners = d.O.ByOwner.Owners[:12]
	}
	s.render(w, r, http.StatusOK, "overview.html", d)
}

// maxPayloadShown bounds the payload a page shows.
const maxPayloadShown = 64 << 10

// timeoutPage is GET /timeouts/{id}: one timeout with its message.
func (s *server) timeoutPage(w http.ResponseWriter, r *http.Request) {
	if err := noQuery(r); err != nil {
		s.fail(w, r, err)
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.m.Get(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := time.Now()
	d := timeoutData{pageData: s.page("../", "Timeout"), T: toRow("../", t, now), Size: len(t.Payload)}
	for _, k := range sortedKeys(t.Metadata) {
		d.Meta = append(d.Meta, namedValue{Name: k, Value: t.Metadata[k]})
	}
	payload := t.Payload
	if len(payload) > maxPayloadShown {
		payload, d.Cut = payload[:maxPayloadShown], true
	}
	if utf8.Valid(payload) || d.Cut {
		d.Payload = strings.ToValidUTF8(string(payload), "\uFFFD")
	} else {
		d.Binary = true
		d.Payload = fmt.Sprintf("% x", payload)
	}
	s.render(w, r, http.StatusOK, "timeout.html", d)
}

// errorPage shows msg, which never repeats the request's input.
func (s *server) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	base := "./"
	if n := strings.Count(strings.TrimPrefix(r.URL.Path, "/"), "/"); n > 0 {
		base = strings.Repeat("../", n)
	}
	d := struct {
		pageData
		Status  int
		Message string
	}{s.page(base, http.StatusText(status)), status, msg}
	s.render(w, r, status, "error.html", d)
}

func (s *server) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := s.pages.ExecuteTemplate(&buf, name, data); err != nil {
		s.cfg.Logger.Error("Dashboard: rendering a page failed", err, nil)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = buf.WriteTo(w)
	}
}

var templateFuncs = template.FuncMap{
	"num":     num,
	"human":   func(s float64) string { return human(time.Duration(s * float64(time.Second))) },
	"utc":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"when":    when,
	"pct":     func(n, of int) int { return pct(n, of) },
	"pct64":   func(n, of uint64) int { return pct(int(n), int(of)) },
	"sum":     sum,
	"ptrTime": func(t *time.Time) time.Time { return *t },
	"clock":   clockText,
	"act":     func(on bool, r row) actionButtons { return actionButtons{On: on, ID: r.ID, Parked: r.Parked != ""} },
}

func pct(n, of int) int {
	if of <= 0 || n <= 0 {
		return 0
	}
	return max(n*100/of, 1)
}

// num writes n with thousands separators.
func num(n any) string {
	var s string
	switch v := n.(type) {
	case int:
		s = strconv.Itoa(v)
	case uint64:
		s = strconv.FormatUint(v, 10)
	default:
		return fmt.Sprint(n)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// human writes d for people: "45s", "3m 20s", "5h 2m", "12d 3h".
func human(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	case d < 1000*24*time.Hour:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	return fmt.Sprintf("%dy", int(d.Hours())/24/365)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slicesSort(keys)
	return keys
}

func sum(m map[string]uint64) uint64 {
	var s uint64
	for _, v := range m {
		s += v
	}
	return s
}

// clockText says how the manager's clock differs from its store's: "3.002s ahead of the store's
// (± 150µs)".
func clockText(c clockOffset) string {
	if !c.Measured {
		return "not measured: a store without a clock of its own (memory, SQLite) goes by this process's"
	}
	d := time.Duration(c.Offset * float64(time.Second))
	e := time.Duration(c.Error * float64(time.Second)).Round(time.Microsecond)
	side := "behind"
	if d < 0 {
		d, side = -d, "ahead of"
	}
	if d >= 10*time.Millisecond {
		d = d.Round(time.Millisecond)
	} else {
		d = d.Round(time.Microsecond)
	}
	if d == 0 {
		return fmt.Sprintf("in step with the store's (± %s)", e)
	}
	return fmt.Sprintf("%s %s the store's (± %s)", d, side, e)
}

// when writes t briefly: its time of day when it is within a day of now, its date otherwise.
func when(t, now time.Time) string {
	if d := t.Sub(now); d < 24*time.Hour && d > -24*time.Hour {
		return t.UTC().Format("15:04:05 UTC")
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}
