package dashboard

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The error codes of the API's error bodies: {"error": {"code": "...", "message": "..."}}.
const (
	codeInvalid          = "invalid_request"
	codeUnauthorized     = "unauthorized"
	codeForbidden        = "forbidden"
	codeReadOnly         = "read_only"
	codeActionsDisabled  = "actions_disabled"
	codeNotFound         = "not_found"
	codeNotPending       = "not_pending"
	codeNotParked        = "not_parked"
	codeMethodNotAllowed = "method_not_allowed"
	codeUnsupported      = "unsupported"
	codeUnavailable      = "unavailable"
	codeInternal         = "internal"
)

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// apiError is an answer other than 200: its message never repeats what the request sent.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeInvalid, msg: fmt.Sprintf(format, args...)}
}

// Paging bounds of a list.
const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

// query is a list request's filters and page, read from its query string.
type query struct {
	ID, Owner, Key, Destination string
	DueFrom, DueBefore          time.Time
	Parked                      bool // only parked timeouts
	Limit                       int
	After                       persistence.Position
}

// listOptions is q as Manager.List takes it.
func (q query) listOptions() persistence.ListOptions {
	return persistence.ListOptions{
		Owner: q.Owner, Key: q.Key, Destination: q.Destination,
		DueFrom: q.DueFrom, DueBefore: q.DueBefore, Limit: q.Limit, After: q.After, Parked: q.Parked,
	}
}

// values is q as a query string, without its page position.
func (q query) values() url.Values {
	v := url.Values{}
	for name, value := range map[string]string{"id": q.ID, "owner": q.Owner, "key": q.Key, "destination": q.Destination} {
		if value != "" {
			v.Set(name, value)
		}
	}
	if !q.DueFrom.IsZero() {
		v.Set("due_from", q.DueFrom.UTC().Format(time.RFC3339Nano))
	}
	if !q.DueBefore.IsZero() {
		v.Set("due_before", q.DueBefore.UTC().Format(time.RFC3339Nano))
	}
	if q.Parked {
		v.Set("parked", "true")
	}
	if q.Limit != defaultPageSize {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// Filters is true when q narrows the list.
func (q query) Filters() bool {
	return q.ID != "" || q.Owner != "" || q.Key != "" || q.Destination != "" || !q.DueFrom.IsZero() || !q.DueBefore.IsZero() || q.Parked
}

// parseQuery reads the filters of a list request. It refuses parameters it does not know,
// repeated ones, and values no stored timeout can have (too long, not UTF-8, control
// characters); its errors name the parameter, never its value.
func parseQuery(r *http.Request) (query, error) {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return query{}, badRequest("the query string is not well-formed")
	}
	q := query{Limit: defaultPageSize}
	for name, vs := range values {
		if len(vs) > 1 {
			return query{}, badRequest("a query parameter is repeated")
		}
		v := vs[0]
		if v == "" {
			continue // an empty form field
		}
		switch name {
		case "id":
			q.ID, err = text("id", v, persistence.MaxIDLength)
		case "owner":
			q.Owner, err = text("owner", v, persistence.MaxIDLength)
		case "key":
			q.Key, err = text("key", v, persistence.MaxIDLength)
		case "destination":
			q.Destination, err = text("destination", v, wire.MaxDestinationLength)
		case "due_from":
			q.DueFrom, err = timestamp("due_from", v)
		case "due_before":
			q.DueBefore, err = timestamp("due_before", v)
		case "limit":
			q.Limit, err = strconv.Atoi(v)
			if err != nil || q.Limit < 1 || q.Limit > maxPageSize {
				err = badRequest("limit must be a whole number in 1..%d", maxPageSize)
			}
		case "after":
			q.After, err = parseCursor(v)
		case "parked":
			switch v {
			case "true":
				q.Parked = true
			case "false":
			default:
				err = badRequest("parked must be true or false")
			}
		default:
			return query{}, badRequest("unknown query parameter (known: id, owner, key, destination, due_from, due_before, parked, limit, after)")
		}
		if err != nil {
			return query{}, err
		}
	}
	if !q.DueFrom.IsZero() && !q.DueBefore.IsZero() && !q.DueFrom.Before(q.DueBefore) {
		return query{}, badRequest("due_from must be before due_before")
	}
	return q, nil
}

// text checks a filter or id: at most max bytes of UTF-8 without control characters.
func text(name, v string, max int) (string, error) {
	switch {
	case len(v) > max:
		return "", badRequest("%s is longer than %d bytes", name, max)
	case !utf8.ValidString(v):
		return "", badRequest("%s is not valid UTF-8", name)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return "", badRequest("%s contains a control character", name)
		}
	}
	return v, nil
}

func timestamp(name, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, badRequest("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", name)
	}
	if err := persistence.ValidateDue(t); err != nil {
		return time.Time{}, badRequest("%s is out of the range of due times", name)
	}
	return t, nil
}

// A cursor is a page's last position, "UNIX-NANOSECONDS.ID" in unpadded URL-safe base64.
func formatCursor(p persistence.Position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.Due.UnixNano(), 10) + "." + p.ID))
}

func parseCursor(v string) (persistence.Position, error) {
	bad := badRequest("after is not a cursor this API returned")
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return persistence.Position{}, bad
	}
	nanos, id, ok := strings.Cut(string(raw), ".")
	if !ok {
		return persistence.Position{}, bad
	}
	n, err := strconv.ParseInt(nanos, 10, 64)
	if err != nil {
		return persistence.Position{}, bad
	}
	if _, err := text("after", id, persistence.MaxIDLength); err != nil || id == "" {
		return persistence.Position{}, bad
	}
	return persistence.Position{Due: time.Unix(0, n).UTC(), ID: id}, nil
}

// pathID reads the id of a /timeouts/{id} path.
func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if id == "" {
		return "", badRequest("the id is empty")
	}
	return text("the id", id, persistence.MaxIDLength)
}

// rescheduleBody is the body of POST /api/timeouts/{id}/reschedule: exactly one of At (RFC 3339)
// and In (a Go duration such as "10m", from now).
type rescheduleBody struct {
	At string `json:"at"`
	In string `json:"in"`
}

// maxDelay bounds a reschedule's "in".
const maxDelay = 100 * 365 * 24 * time.Hour

func (b rescheduleBody) due(now time.Time) (time.Time, error) {
	switch {
	case (b.At == "") == (b.In == ""):
		return time.Time{}, badRequest(`give exactly one of "at" (RFC 3339) and "in" (a duration such as "10m")`)
	case b.At != "":
		return timestamp("at", b.At)
	}
	d, err := time.ParseDuration(b.In)
	if err != nil || d < 0 || d > maxDelay {
		return time.Time{}, badRequest(`"in" must be a duration such as "90s" or "2h30m", not negative, at most 100 years`)
	}
	return now.Add(d), nil
}
