package dashboard

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strings"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

//go:embed assets
var assets embed.FS

// server is the dashboard's handler.
type server struct {
	m     *timeouts.Manager
	cfg   Config
	mux   *http.ServeMux
	pages *template.Template
}

func newServer(m *timeouts.Manager, cfg Config) (*server, error) {
	pages, err := template.New("").Funcs(templateFuncs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	s := &server{m: m, cfg: cfg, mux: http.NewServeMux(), pages: pages}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("/{$}", s.method(http.MethodGet, s.overviewPage))
	s.mux.HandleFunc("/timeouts/{id}", s.method(http.MethodGet, s.timeoutPage))
	s.mux.HandleFunc("/api/stats", s.method(http.MethodGet, s.apiStats))
	s.mux.HandleFunc("/api/timeouts", s.method(http.MethodGet, s.apiList))
	s.mux.HandleFunc("/api/timeouts/{id}", s.method(http.MethodGet, s.apiGet))
	s.mux.HandleFunc("/api/timeouts/{id}/{action}", s.method(http.MethodPost, s.apiAction))
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such API path")
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.errorPage(w, r, http.StatusNotFound, "No such page.")
	})
	return s, nil
}

// maxURL bounds a request's path and query: ids and filters are at most 250 bytes each.
const maxURL = 4096

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if len(r.URL.RawPath)+len(r.URL.Path)+len(r.URL.RawQuery) > maxURL {
		s.fail(w, r, badRequest("the URL is longer than %d bytes", maxURL))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// method answers other methods than want with a 405.
func (s *server) method(want string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != want && !(want == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", want)
			s.fail(w, r, &apiError{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed, msg: "use " + want})
			return
		}
		h(w, r)
	}
}

func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }

// fail answers err: as a JSON error body under /api/, as a page elsewhere. The text of an
// unexpected error (the store's, which may name a host) is logged, never sent.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = s.classify(r, err)
	}
	if isAPI(r) {
		writeError(w, ae.status, ae.code, ae.msg)
		return
	}
	s.errorPage(w, r, ae.status, ae.msg)
}

// classify turns an error of the manager into an apiError.
func (s *server) classify(r *http.Request, err error) *apiError {
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: codeNotFound, msg: "no pending timeout has that id"}
	case errors.Is(err, persistence.ErrInvalidTimeout):
		return badRequest("%s", err.Error())
	case errors.Is(err, persistence.ErrUnsupported):
		return &apiError{status: http.StatusNotImplemented, code: codeUnsupported, msg: "the store cannot do this: " + err.Error()}
	case r.Context().Err() != nil:
		return &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "the request was cancelled"}
	}
	s.cfg.Logger.Error("Dashboard: the store failed", err, watermill.LogFields{"path": r.URL.Path})
	return &apiError{status: http.StatusInternalServerError, code: codeInternal, msg: "the store failed; the service's log has the error"}
}

// authorize refuses an action unless the configuration allows actions and the request carries
// the token in its Authorization header.
func (s *server) authorize(r *http.Request) error {
	switch {
	case s.cfg.ReadOnly:
		return &apiError{status: http.StatusForbidden, code: codeReadOnly, msg: "the dashboard is read-only"}
	case s.cfg.Token == "":
		return &apiError{status: http.StatusForbidden, code: codeActionsDisabled, msg: "actions are disabled: no token is configured"}
	case r.Header.Get("Sec-Fetch-Site") == "cross-site":
		return &apiError{status: http.StatusForbidden, code: codeForbidden, msg: "cross-site requests are refused"}
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		return &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, msg: "send the token as Authorization: Bearer TOKEN"}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
		return &apiError{status: http.StatusForbidden, code: codeForbidden, msg: "the token is wrong"}
	}
	return nil
}

// actionsEnabled reports whether the pages show the action buttons.
func (s *server) actionsEnabled() bool { return !s.cfg.ReadOnly && s.cfg.Token != "" }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="timeoutmill"`)
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: code, Message: msg}})
}
