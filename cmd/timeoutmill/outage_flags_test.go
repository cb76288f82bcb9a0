package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// --outage-wait is the poller's wait, and storing's and dispatching's when shorter than their
// library defaults; --call-timeout is at most the outage wait.
func TestOutageWaitReachesEveryBreaker(t *testing.T) {
	t.Parallel()
	transport := &connect.Transport{}

	c := parseRun(t)
	cfg := c.managerConfig(nil, transport, nil, nil)
	require.Equal(t, 2*time.Minute, cfg.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages)
	require.Equal(t, timeouts.DefaultTimeToTriggerStoreCircuitBreaker, cfg.TimeToTriggerStoreCircuitBreaker, "the library's 30 s when the wait is longer")
	require.Equal(t, timeouts.DefaultTimeToTriggerDispatchCircuitBreaker, cfg.TimeToTriggerDispatchCircuitBreaker)
	require.Equal(t, 10*time.Second, cfg.CallTimeout)

	c = parseRun(t, "--outage-wait", "5s")
	cfg = c.managerConfig(nil, transport, nil, nil)
	require.Equal(t, 5*time.Second, cfg.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages)
	require.Equal(t, 5*time.Second, cfg.TimeToTriggerStoreCircuitBreaker, "a broker or store silent for the wait stops the service")
	require.Equal(t, 5*time.Second, cfg.TimeToTriggerDispatchCircuitBreaker)
	require.Equal(t, 5*time.Second, cfg.CallTimeout, "no call outlasts the wait")

	c = parseRun(t, "--call-timeout", "3s")
	cfg = c.managerConfig(nil, transport, nil, nil)
	require.Equal(t, 3*time.Second, cfg.CallTimeout)
}

// The AMQP heartbeat follows the wait: a quarter of it, between 2 s and the transport's default.
func TestHeartbeatFollowsTheOutageWait(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2*time.Second, heartbeatFor(time.Second), "never under 2 s")
	require.Equal(t, 2*time.Second, heartbeatFor(5*time.Second))
	require.Equal(t, 5*time.Second, heartbeatFor(20*time.Second))
	require.Equal(t, 7500*time.Millisecond, heartbeatFor(2*time.Minute), "a quarter of the dispatch breaker's 30 s")
	require.LessOrEqual(t, heartbeatFor(time.Hour), amqptransport.DefaultHeartbeat)
}

// --clock-skew-alarm reaches the manager; its default is the library's.
func TestClockSkewAlarmFlag(t *testing.T) {
	t.Parallel()
	transport := &connect.Transport{}
	c := parseRun(t)
	require.Equal(t, timeouts.DefaultClockSkewAlarm, c.managerConfig(nil, transport, nil, nil).ClockSkewAlarm)
	c = parseRun(t, "--clock-skew-alarm", "250ms")
	require.Equal(t, 250*time.Millisecond, c.managerConfig(nil, transport, nil, nil).ClockSkewAlarm)
}
