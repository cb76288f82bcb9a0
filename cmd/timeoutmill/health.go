package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// probes answer the health and readiness probes of `timeoutmill run`, on the --http listener and
// on the --metrics-addr listener:
//
//	GET /healthz  200 while the process serves: an orchestrator's liveness probe
//	GET /readyz   200 once the endpoint is set up and subscribed, no stage's breaker is armed,
//	              the instance name is held and nothing stopped it; 503 otherwise
//
// Both answer JSON: {"status": ..., "endpoint": ..., "instance": ..., "not_ready": [...]}, where
// not_ready names each failing condition (timeouts.Manager.Health), with the passwords of the
// store DSN and the transport URL redacted.
type probes struct {
	endpoint, instance string
	secrets            []string // the store DSN and the transport URL, redacted from the reasons

	mu      sync.Mutex
	opening string            // what the start is waiting for before the manager exists
	manager *timeouts.Manager // nil until made
}

func newProbes(endpoint, instance string, secrets ...string) *probes {
	return &probes{endpoint: endpoint, instance: instance, secrets: secrets, opening: "starting"}
}

// waiting records what the start waits for ("store not open: <err>") until the manager exists.
func (p *probes) waiting(what string, err error) {
	if err != nil {
		what += ": " + err.Error()
	}
	p.mu.Lock()
	p.opening = what
	p.mu.Unlock()
}

// follow makes the manager's Health the readiness from now on.
func (p *probes) follow(m *timeouts.Manager) {
	p.mu.Lock()
	p.manager = m
	p.mu.Unlock()
}

// notReady lists the failing conditions, redacted; none when ready.
func (p *probes) notReady() []string {
	p.mu.Lock()
	manager, opening := p.manager, p.opening
	p.mu.Unlock()
	var reasons []string
	if manager == nil {
		reasons = []string{opening}
	} else if err := manager.Health(); err != nil {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				reasons = append(reasons, e.Error())
			}
		} else {
			reasons = []string{err.Error()}
		}
	}
	for i, r := range reasons {
		for _, secret := range p.secrets {
			r = connect.RedactError(errors.New(r), secret).Error()
		}
		reasons[i] = r
	}
	return reasons
}

// probeBody is the JSON body of /healthz and /readyz.
type probeBody struct {
	Status   string   `json:"status"` // "serving" (healthz), "ready" or "not ready" (readyz)
	Endpoint string   `json:"endpoint"`
	Instance string   `json:"instance"`
	NotReady []string `json:"not_ready,omitempty"`
}

// register adds /healthz and /readyz to mux.
func (p *probes) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		p.answer(w, http.StatusOK, probeBody{Status: "serving"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if reasons := p.notReady(); len(reasons) > 0 {
			p.answer(w, http.StatusServiceUnavailable, probeBody{Status: "not ready", NotReady: reasons})
			return
		}
		p.answer(w, http.StatusOK, probeBody{Status: "ready"})
	})
}

func (p *probes) answer(w http.ResponseWriter, status int, body probeBody) {
	body.Endpoint, body.Instance = p.endpoint, p.instance
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
