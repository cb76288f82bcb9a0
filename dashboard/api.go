package dashboard

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// timeoutJSON is a timeout in the API's bodies. Payload is set by GET /api/timeouts/{id} only:
// PayloadText when the payload is UTF-8 text, PayloadBase64 otherwise.
type timeoutJSON struct {
	ID           string    `json:"id"`
	Destination  string    `json:"destination"`
	Due          time.Time `json:"due"`
	Owner        string    `json:"owner,omitempty"`
	Key          string    `json:"key,omitempty"`
	FailureCount int       `json:"failure_count"`
	// ParkedReason is why the timeout was parked; absent when it is not parked.
	ParkedReason  string            `json:"parked_reason,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	PayloadBytes  *int              `json:"payload_bytes,omitempty"`
	PayloadText   *string           `json:"payload_text,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
}

func toJSON(t persistence.Timeout, withPayload bool) timeoutJSON {
	j := timeoutJSON{
		ID: t.ID, Destination: t.Destination, Due: t.Due.UTC(), Owner: t.Owner, Key: t.Key,
		FailureCount: t.FailureCount, Metadata: t.Metadata, ParkedReason: t.Parked,
	}
	if withPayload {
		n := len(t.Payload)
		j.PayloadBytes = &n
		if utf8.Valid(t.Payload) {
			text := string(t.Payload)
			j.PayloadText = &text
		} else {
			j.PayloadBase64 = t.Payload
		}
	}
	return j
}

type listJSON struct {
	Timeouts []timeoutJSON `json:"timeouts"`
	// Next is the cursor of the next page (the after parameter), absent on the last page.
	Next string `json:"next,omitempty"`
}

// list reads the page q asks for: the one timeout with q.ID, or a page of List. next is the
// cursor of the following page, "" on the last.
func (s *server) list(r *http.Request, q query) (page []persistence.Timeout, next string, err error) {
	if q.ID != "" {
		t, err := s.m.Get(r.Context(), q.ID)
		if errors.Is(err, persistence.ErrNotFound) {
			return nil, "", nil
		}
		if err != nil {
			return nil, "", err
		}
		t.Payload = nil
		return []persistence.Timeout{t}, "", nil
	}
	opts := q.listOptions()
	opts.Limit = q.Limit + 1 // one more tells whether a next page exists
	page, err = s.m.List(r.Context(), opts)
	if err != nil {
		return nil, "", err
	}
	if len(page) > q.Limit {
		page = page[:q.Limit]
		last := page[len(page)-1]
		next = formatCursor(persistence.Position{Due: last.Due, ID: last.ID})
	}
	return page, next, nil
}

// apiList is GET /api/timeouts?owner=&key=&destination=&id=&due_from=&due_before=&parked=&limit=&after=.
func (s *server) apiList(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page, next, err := s.list(r, q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body := listJSON{Timeouts: make([]timeoutJSON, 0, len(page)), Next: next}
	for _, t := range page {
		body.Timeouts = append(body.Timeouts, toJSON(t, false))
	}
	writeJSON(w, http.StatusOK, body)
}

// apiGet is GET /api/timeouts/{id}: the timeout with its message.
func (s *server) apiGet(w http.ResponseWriter, r *http.Request) {
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
	writeJSON(w, http.StatusOK, toJSON(t, true))
}

// apiStats is GET /api/stats.
func (s *server) apiStats(w http.ResponseWriter, r *http.Request) {
	if err := noQuery(r); err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.overview(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// actionJSON is the answer to an action.
type actionJSON struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	// Due is the timeout's due time after a reschedule, if it is still pending.
	Due *time.Time `json:"due,omitempty"`
}

// maxBody bounds an action's body.
const maxBody = 4096

// apiAction is POST /api/timeouts/{id}/cancel, /reschedule (body {"at": ...} or {"in": ...})
// and /deliver (now); for a parked timeout, /replay (pending again, see Manager.Unpark) and
// /delete (deleted, only if it is parked).
func (s *server) apiAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	switch action {
	case "cancel", "reschedule", "deliver", "replay", "delete":
	default:
		writeError(w, http.StatusNotFound, codeNotFound, "no such action (cancel, reschedule, deliver, replay, delete)")
		return
	}
	if err := s.authorize(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := noQuery(r); err != nil {
		s.fail(w, r, err)
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if action == "replay" || action == "delete" {
		s.parkedAction(w, r, id, action)
		return
	}
	var ok bool
	switch action {
	case "cancel":
		ok, err = s.m.Cancel(r.Context(), id)
	case "deliver":
		ok, err = s.m.Reschedule(r.Context(), id, time.Now())
	case "reschedule":
		var due time.Time
		if due, err = readReschedule(w, r); err == nil {
			ok, err = s.m.Reschedule(r.Context(), id, due)
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ok {
		writeError(w, http.StatusConflict, codeNotPending, "the timeout is not pending: delivered, cancelled, never stored, or being delivered right now")
		return
	}
	body := actionJSON{ID: id, Action: action}
	if action == "reschedule" {
		if t, err := s.m.Get(r.Context(), id); err == nil {
			due := t.Due.UTC()
			body.Due = &due
		}
	}
	writeJSON(w, http.StatusOK, body)
}

// parkedAction replays or deletes a parked timeout; one that is not parked is left as it is.
func (s *server) parkedAction(w http.ResponseWriter, r *http.Request, id, action string) {
	var (
		ok  bool
		err error
	)
	var n int
	if action == "replay" {
		n, err = s.m.Unpark(r.Context(), id)
	} else {
		n, err = s.m.DeleteParked(r.Context(), id)
	}
	ok = n == 1
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ok {
		writeError(w, http.StatusConflict, codeNotParked, "the timeout is not parked: pending, delivered, cancelled, or never stored")
		return
	}
	writeJSON(w, http.StatusOK, actionJSON{ID: id, Action: action})
}

func readReschedule(w http.ResponseWriter, r *http.Request) (time.Time, error) {
	var b rescheduleBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return time.Time{}, badRequest(`the body must be JSON: {"at": "2026-01-02T15:04:05Z"} or {"in": "10m"}, at most %d bytes`, maxBody)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return time.Time{}, badRequest("the body must hold one JSON object")
	}
	return b.due(time.Now())
}

// noQuery refuses a query string where none is read.
func noQuery(r *http.Request) error {
	if r.URL.RawQuery != "" {
		return badRequest("this path takes no query parameters")
	}
	return nil
}
