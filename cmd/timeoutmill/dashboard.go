package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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

// serveDashboard serves the manager's dashboard until stop is called; it returns at once when
// --http is not set.
func (f httpFlags) serveDashboard(manager *timeouts.Manager, logger watermill.LoggerAdapter) (stop func(), err error) {
	if f.HTTP == "" {
		return func() {}, nil
	}
	addr, err := dashboardAddr(f.HTTP)
	if err != nil {
		return nil, err
	}
	handler, err := dashboard.New(manager, dashboard.Config{Token: f.HTTPToken, ReadOnly: f.HTTPReadOnly, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("--http-token: %w", err)
	}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
	logger.Info("Serving the dashboard", watermill.LogFields{"url": "http://" + listener.Addr().String() + "/", "actions": actions})
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(ctx)
	}, nil
}
