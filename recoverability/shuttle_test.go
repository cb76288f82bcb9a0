package recoverability_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/wire"
)

// The two configurations of Shuttle's "Deferred Messages" page, verbatim.
const (
	shuttleWithoutDeferredQueue = `{
  "Shuttle": {
    "ServiceBus": {
      "Inbox": {
        "WorkQueueUri": "queue://configuration/server-inbox-work",
        "ErrorQueueUri": "queue://configuration/error",
        "DurationToIgnoreOnFailure": [
          "00:00:10",
          "00:00:30",
          "00:01:00"
        ] 
      }
    }
  }
}`
	shuttleWithDeferredQueue = `{
  "Shuttle": {
    "ServiceBus": {
      "Inbox": {
        "WorkQueueUri": "queue://configuration/server-inbox-work",
        "DeferredQueueUri": "queue://configuration/server-inbox-deferred",
        "ErrorQueueUri": "queue://configuration/error"
      }
    }
  }
}`
)

// loadShuttleFile writes a Shuttle configuration file and loads it, as a Shuttle user would.
func loadShuttleFile(t *testing.T, content string) recoverability.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "appsettings.json")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	var cfg recoverability.Config
	require.NoError(t, recoverability.LoadConfigFile(path, &cfg))
	return cfg
}

// logLine is one line a captureLogger was given.
type logLine struct {
	level, msg string
}

// captureLogger keeps what is logged at Info level and above.
type captureLogger struct {
	mu    *sync.Mutex
	lines *[]logLine
}

func newCaptureLogger() captureLogger { return captureLogger{mu: &sync.Mutex{}, lines: &[]logLine{}} }

func (l captureLogger) add(level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, logLine{level, msg})
}
func (l captureLogger) Error(msg string, _ error, _ watermill.LogFields) { l.add("error", msg) }
func (l captureLogger) Info(msg string, _ watermill.LogFields)           { l.add("info", msg) }
func (l captureLogger) Debug(string, watermill.LogFields)                {}
func (l captureLogger) Trace(string, watermill.LogFields)                {}
func (l captureLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// count is how many lines contain text.
func (l captureLogger) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range *l.lines {
		if strings.Contains(line.msg, text) {
			n++
		}
	}
	return n
}

const thrashingWarning = "no deferred queue, so messages waiting for a delayed retry go round the work queue"

// startWithLogger is start with the logger of the Retries given.
func startWithLogger(t *testing.T, ps pubSub, cfg recoverability.Config, logger watermill.LoggerAdapter, outcome func(int, *message.Message) error) *testBundle {
	t.Helper()
	retries, err := recoverability.New(cfg, logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	calls := &callLog{}
	router.AddConsumerHandler(handlerName, cfg.WorkQueue, ps, func(msg *message.Message) error {
		return outcome(calls.record(msg), msg)
	}).AddMiddleware(retries.Middleware)
	require.NoError(t, retries.AddToRouter(router))
	runRouter(t, router)
	return &testBundle{retries: retries, router: router, calls: calls}
}

// Shuttle's first configuration: no deferred queue. It loads and runs as it stands; a failed
// message waits its 10 s on the work queue, going round it (Shuttle's queue thrashing), which a
// warning in the log says once.
func TestShuttlesConfigurationWithoutADeferredQueueRunsAsItStands(t *testing.T) {
	t.Parallel()
	cfg := loadShuttleFile(t, shuttleWithoutDeferredQueue)
	require.Equal(t, "server-inbox-work", cfg.WorkQueue)
	require.Equal(t, "error", cfg.ErrorQueue)
	require.Empty(t, cfg.DeferredQueue)
	require.Equal(t, []time.Duration{10 * time.Second, 30 * time.Second, time.Minute}, cfg.DurationToIgnoreOnFailure)

	ps := newGoChannel(t)
	counting := &countingPublisher{Publisher: ps}
	cfg.Publisher = counting // no Subscriber: only a deferred queue needs one
	logger := newCaptureLogger()
	b := startWithLogger(t, ps, cfg, logger, func(n int, _ *message.Message) error {
		if n == 1 {
			return errRefused
		}
		return nil
	})
	require.Empty(t, b.retries.DeferredQueue())
	require.Len(t, b.router.Handlers(), 1, "no deferred queue to process")

	msg := message.NewMessage(watermill.NewUUID(), []byte("thrash"))
	require.NoError(t, ps.Publish("server-inbox-work", msg))
	calls := b.calls.waitCalls(t, msg.UUID, 2, time.Minute)
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 10*time.Second, "the first failure waits 10 s")
	require.Equal(t, "1", calls[1].metadata.Get(wire.HeaderRetryDelayedRetries))
	require.Greater(t, counting.count("server-inbox-work"), 2, "the waiting message went round the work queue")
	require.Equal(t, 1, logger.count(thrashingWarning), "the thrashing is warned about once")
	t.Logf("the waiting message went round the work queue %d times in %s",
		counting.count("server-inbox-work"), calls[1].at.Sub(calls[0].at).Round(time.Millisecond))
}

// Shuttle's second configuration: a deferred queue named server-inbox-deferred, which is this
// instance's deferred queue as it is named; the schedule is the default, 10 s first.
func TestShuttlesConfigurationWithADeferredQueueRunsAsItStands(t *testing.T) {
	t.Parallel()
	cfg := loadShuttleFile(t, shuttleWithDeferredQueue)
	require.Equal(t, "server-inbox-work", cfg.WorkQueue)
	require.Equal(t, "server-inbox-deferred", cfg.DeferredQueue)
	require.Equal(t, "error", cfg.ErrorQueue)

	ps := newGoChannel(t)
	counting := &countingPublisher{Publisher: ps}
	cfg.Publisher, cfg.Subscriber = counting, ps
	logger := newCaptureLogger()
	b := startWithLogger(t, ps, cfg, logger, func(n int, _ *message.Message) error {
		if n == 1 {
			return errRefused
		}
		return nil
	})
	require.Equal(t, "server-inbox-deferred", b.retries.DeferredQueue())
	require.Contains(t, b.router.Handlers(), "server-inbox-deferred")

	msg := message.NewMessage(watermill.NewUUID(), []byte("deferred"))
	require.NoError(t, ps.Publish("server-inbox-work", msg))
	calls := b.calls.waitCalls(t, msg.UUID, 2, time.Minute)
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 10*time.Second, "the default schedule's first wait is 10 s")
	require.Equal(t, "1", calls[1].metadata.Get(wire.HeaderRetryDelayedRetries))
	moves := counting.count("server-inbox-deferred")
	require.GreaterOrEqual(t, moves, 1, "it waited in the deferred queue")
	require.LessOrEqual(t, moves, 2, "moved in once, put back at most once by the pass that found it")
	require.LessOrEqual(t, counting.count("server-inbox-work"), 3, "no thrashing: the retry, the return when due")
	require.Zero(t, logger.count(thrashingWarning))
}
