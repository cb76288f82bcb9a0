package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/satellites"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

type runCmd struct {
	storeFlags     `embed:""`
	transportFlags `embed:""`
	httpFlags      `embed:""`

	Instance        string        `help:"Name of this instance, in logs and on what its poller claims. A stable name (a StatefulSet pod's name, a systemd unit's instance) makes a restart after a crash take back at once the ids the killed run claimed, instead of after --claim-lease. Two running processes must never share a name: PostgreSQL, MariaDB, SQL Server and SQLite stores refuse the second at start (it exits non-zero naming the instance). Defaults to host name and process id, new at each start: processes never collide, and a restart waits for the lease."`
	PollInterval    time.Duration `default:"1m" help:"Longest time between looks at the store (it also wakes at the next due time)."`
	ClaimLease      time.Duration `default:"1m" help:"How long ids claimed by the poller stay hidden from other pollers; ids claimed but not announced (after a kill -9, say) are claimed again when it ends. At least 1s; below 30s ids still being announced or dispatched may be announced again (duplicates, never loss)."`
	AnnouncementIDs int           `name:"announcement-ids" default:"100" help:"Most due ids one dispatcher message carries (1 to 1000). Set 1 while instances of a release that reads one id per message still run (a rolling upgrade)."`
	OutageWait      time.Duration `default:"2m" help:"How long the store or the broker may fail or stop answering before a critical error stops the service: the poller's wait (TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages), and storing's and dispatching's when shorter than their 30s. Calls that hang count: the error comes on time even when the network drops packets instead of refusing them. Start-up also waits this long for an unreachable store or broker."`
	CallTimeout     time.Duration `default:"10s" help:"The longest one call to the store or the broker may take before it fails and is tried again (capped at --outage-wait)."`
	ClockSkewAlarm  time.Duration `default:"1s" help:"Warn (once per change) and show on the dashboard when this instance's clock differs from the database store's by more than this. Delivery never depends on it: the store's clock decides due."`
	NumberOfRetries int           `default:"0" help:"Retries of a failed forward before the message goes to the error queue."`
	MetricsAddr     string        `help:"Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9464." placeholder:"ADDR"`
	SkipSetup       bool          `help:"Do not create the table or declare the queues at start (see the setup command)."`
	CloseTimeout    time.Duration `default:"30s" help:"How long shutdown waits for messages in flight."`
	ExactlyOnce     bool          `help:"Forward each due message and remove its timeout in one transaction. Needs a postgres:// transport and store on the same database; refused otherwise."`
}

// Run hosts the endpoint's timeout manager until a signal or a critical error.
func (c *runCmd) Run(e *env) error {
	if c.Instance == "" {
		c.Instance = defaultInstance()
	}
	logger := newLogger(e).With(watermill.LogFields{"endpoint": c.Endpoint, "instance": c.Instance})
	if err := c.validate(); err != nil {
		return err // before listening or connecting
	}
	if err := checkClaimLease(c.ClaimLease, logger); err != nil {
		return err // before connecting to anything
	}
	if c.HTTP != "" {
		if _, err := dashboardAddr(c.HTTP); err != nil {
			return err // before connecting to anything
		}
	}
	if c.ExactlyOnce {
		if err := connect.CheckExactlyOnce(c.Transport, c.Store); err != nil {
			return err // before connecting to anything
		}
	}

	// The probes and the metrics answer from the start, while the store and the broker are
	// waited for: a liveness probe must not restart a process that waits as told.
	probes := newProbes(c.Endpoint, c.Instance, c.Store, c.Transport)
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if c.MetricsAddr != "" {
		stop, err := serveMetrics(c.MetricsAddr, registry, probes, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	site, err := c.serveHTTP(probes, logger)
	if err != nil {
		return err
	}
	defer site.stop()

	probes.waiting("store not open", nil)
	store, err := c.openStore(e.ctx, c.OutageWait, logger, func(err error) { probes.waiting("store not open", err) })
	if err != nil {
		return err
	}
	defer store.Close()
	probes.waiting("transport not open", nil)
	transport, err := retry(e.ctx, c.OutageWait, logger, "transport", func() (*connect.Transport, error) {
		opts := c.transportOptions()
		opts.Heartbeat = heartbeatFor(c.OutageWait)
		t, err := connect.OpenTransportWith(e.ctx, c.Transport, opts, logger)
		if err != nil {
			probes.waiting("transport not open", err)
		}
		return t, err
	})
	if err != nil {
		return err
	}
	defer transport.Close()
	if !c.SkipSetup && transport.DeclareEndpoint != nil {
		probes.waiting("queues not declared", nil)
		if err := transport.DeclareEndpoint(e.ctx, c.Endpoint, c.ErrorQueue); err != nil {
			return fmt.Errorf("declaring the queues of %s: %w", c.Endpoint, connect.RedactError(err, c.Transport))
		}
	}

	var forwarder satellites.Forwarder
	if c.ExactlyOnce {
		probes.waiting("exactly-once forwarder not open", nil)
		forwarder, err = retry(e.ctx, c.OutageWait, logger, "database", func() (satellites.Forwarder, error) {
			f, err := connect.ExactlyOnceForwarder(e.ctx, transport, store, logger)
			if err != nil {
				probes.waiting("exactly-once forwarder not open", err)
			}
			return f, err
		})
		if err != nil {
			return err
		}
	}

	tp, shutdownTracing, err := tracerProvider(e.ctx, os.Getenv, logger)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(ctx); err != nil {
			logger.Error("Exporting the last spans failed", err, nil)
		}
	}()
	config := c.managerConfig(store, transport, registry, forwarder)
	config.TracerProvider = tp
	manager, err := timeouts.NewManager(config, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: c.CloseTimeout}, logger)
	if err != nil {
		return err
	}
	if err := manager.AddToRouter(router); err != nil {
		return err
	}
	probes.follow(manager)
	if err := site.show(manager); err != nil {
		return err
	}

	logger.Info("Running", watermill.LogFields{"store": connect.Redact(c.Store), "transport": connect.Redact(c.Transport),
		"exactly_once": c.ExactlyOnce, "claim_lease": c.ClaimLease})
	runErr := router.Run(e.ctx)
	// The poller announces what it claimed before the router closed; the transport closes only
	// after that, or those ids would wait for their lease.
	select {
	case <-router.Running(): // it ran, and so did the poller
		select {
		case <-manager.Done():
		case <-time.After(c.CloseTimeout):
			logger.Error("The poller did not stop within the close timeout; ids it claimed wait for their lease", nil, nil)
		}
	default:
	}
	if runErr != nil {
		return runErr
	}
	if err := manager.Err(); err != nil {
		return err
	}
	logger.Info("Stopped", nil)
	return nil
}

// managerConfig is the configuration of the endpoint's timeout manager the flags describe.
func (c *runCmd) managerConfig(store persistence.Store, transport *connect.Transport, registry prometheus.Registerer,
	forwarder satellites.Forwarder) timeouts.Config {
	return timeouts.Config{
		Endpoint:          c.Endpoint,
		Store:             store,
		Publisher:         transport.Publisher,
		Subscriber:        transport.Subscriber,
		ErrorQueue:        c.ErrorQueue,
		PollInterval:      c.PollInterval,
		ClaimLease:        c.ClaimLease,
		AnnouncementIDs:   c.AnnouncementIDs,
		NumberOfRetries:   c.NumberOfRetries,
		MetricsRegisterer: registry,
		Forwarder:         forwarder,
		TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages: c.OutageWait,
		TimeToTriggerStoreCircuitBreaker:                        min(c.OutageWait, timeouts.DefaultTimeToTriggerStoreCircuitBreaker),
		TimeToTriggerDispatchCircuitBreaker:                     min(c.OutageWait, timeouts.DefaultTimeToTriggerDispatchCircuitBreaker),
		CallTimeout:                                             min(c.CallTimeout, c.OutageWait),
		ClockSkewAlarm:                                          c.ClockSkewAlarm,
		SkipInfrastructureSetup:                                 c.SkipSetup,
		Instance:                                                c.Instance,
	}
}

// heartbeatFor is the AMQP heartbeat for an outage wait: a quarter of the storing and dispatching
// waits, so that a broker that stopped answering is found gone (three heartbeats heard of nothing)
// within the wait, and the calls waiting on its connection end; at least 2 s, under which a loaded
// machine risks dropping good connections, and at most the transport's default.
func heartbeatFor(outageWait time.Duration) time.Duration {
	wait := min(outageWait, timeouts.DefaultTimeToTriggerDispatchCircuitBreaker)
	return min(max(wait/4, 2*time.Second), amqptransport.DefaultHeartbeat)
}

// defaultInstance is the name of an instance started without --instance: host name and process
// id. It changes at each start, so two processes on one host never share it, and a restarted
// process does not take back what the killed one claimed (that waits for the claims' lease).
func defaultInstance() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Bounds of --claim-lease.
//
// A claim's lease must outlast the time from claiming an id to removing its timeout: announcing it
// on the dispatcher queue (the poller allows an announcement 30 s), waiting there behind the ids
// announced before it, and forwarding it (a failing forward is retried for the dispatch circuit
// breaker's 30 s before a critical error). An id whose lease ends earlier is claimed and
// announced again: a second dispatch that finds it removed does nothing, one that runs at the same
// time delivers it twice, and while the dispatcher queue takes longer than the lease to drain,
// every id in it is announced again each lease, making the queue longer still. Nothing is lost
// either way, so a short lease is only warned about; below minClaimLease it would happen under
// any load, and is refused.
const (
	minClaimLease  = time.Second
	safeClaimLease = 30 * time.Second
)

// checkClaimLease refuses a lease shorter than minClaimLease and warns about one shorter than
// safeClaimLease.
func checkClaimLease(lease time.Duration, logger watermill.LoggerAdapter) error {
	if lease < minClaimLease {
		return fmt.Errorf("--claim-lease %s is too short: it must be at least %s, or ids still being announced or dispatched "+
			"are announced again on every claim", lease, minClaimLease)
	}
	if lease < safeClaimLease {
		warn(logger, "--claim-lease is shorter than an announcement or a failing forward may take; ids still being announced "+
			"or dispatched may be announced again and delivered twice (never lost)",
			watermill.LogFields{"claim_lease": lease, "recommended_at_least": safeClaimLease})
	}
	return nil
}

// serveMetrics serves registry at addr/metrics, and the probes at /healthz and /readyz, until
// stop is called.
func serveMetrics(addr string, registry *prometheus.Registry, probes *probes, logger watermill.LoggerAdapter) (stop func(), err error) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	probes.register(mux)
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("Metrics server stopped", err, nil)
		}
	}()
	logger.Info("Serving metrics", watermill.LogFields{"url": "http://" + listener.Addr().String() + "/metrics", "probes": "/healthz, /readyz"})
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(ctx)
	}, nil
}
