package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// httpFlags configure the dashboard of `timeoutmill run`.
type httpFlags struct {
	HTTP         string `name:"http" help:"Serve the dashboard and its JSON API at http://ADDR/, e.g. 127.0.0.1:8080. Off by default; a bare :PORT binds 127.0.0.1 (give 0.0.0.0:PORT to listen on every interface)." placeholder:"ADDR"`
	HTTPToken    string `name:"http-token" help:"Token that enables the dashboard's actions (cancel, reschedule, deliver now), sent as Authorization: Bearer TOKEN; at least 16 bytes. Give it as TIMEOUTMILL_HTTP_TOKEN rather than on the command line. Without it the dashboard only reads." placeholder:"TOKEN"`
	HTTPReadOnly bool   `name:"http-read-only" help:"Refuse the dashboard's actions even with the token."`
}

// dashboardAddr is addr with the loopback address when it names no host.
func dashboardAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--http %q: expected HOST:PORT such as 127.0.0.1:8080: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// dashboardServer serves --http: /healthz and /readyz from the start, and the dashboard once
// the manager is made (show); until then its pages answer 503.
type dashboardServer struct {
	flags     httpFlags
	logger    watermill.LoggerAdapter
	server    *http.Server
	dashboard atomic.Pointer[http.Handler]
}

// serveHTTP listens on --http and serves until stop is called; it returns nil when --http is not
// set (show and stop do nothing then).
func (f httpFlags) serveHTTP(probes *probes, logger watermill.LoggerAdapter) (*dashboardServer, error) {
	if f.HTTP == "" {
		return nil, nil
	}
	addr, err := dashboardAddr(f.HTTP)
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	s := &dashboardServer{flags: f, logger: logger}
	mux := http.NewServeMux()
	probes.register(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if h := s.dashboard.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		http.Error(w, "timeoutmill is starting: "+strings.Join(probes.notReady(), "; "), http.StatusServiceUnavailable)
	})
	s.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := s.server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("Dashboard server stopped", err, nil)
		}
	}()
	actions := "enabled"
	switch {
	case f.HTTPReadOnly:
		actions = "off (read-only)"
	case f.HTTPToken == "":
		actions = "off (no --http-token)"
	}
	logger.Info("Serving the dashboard", watermill.LogFields{"url": "http://" + listener.Addr().String() + "/", "actions": actions,
		"probes": "/healthz, /readyz"})
	return s, nil
}

// show serves the manager's dashboard from now on.
func (s *dashboardServer) show(manager *timeouts.Manager) error {
	if s == nil {
		return nil
	}
	handler, err := dashboard.New(manager, dashboard.Config{Token: s.flags.HTTPToken, ReadOnly: s.flags.HTTPReadOnly, Logger: s.logger})
	if err != nil {
		return fmt.Errorf("--http-token: %w", err)
	}
	s.dashboard.Store(&handler)
	return nil
}

// stop shuts the server down, waiting up to 5 s for the requests in flight.
func (s *dashboardServer) stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.server.Shutdown(ctx)
}
