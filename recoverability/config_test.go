package recoverability_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/wire"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	cfg := baseConfig(ps)
	cfg.DurationToIgnoreOnFailure = nil
	r, err := recoverability.New(cfg, nil)
	require.NoError(t, err)
	require.Equal(t, "orders.Deferred.test-1", r.DeferredQueue())
	require.Equal(t, []time.Duration{10 * time.Second, 30 * time.Second, time.Minute}, recoverability.DefaultDurationToIgnoreOnFailure())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	cases := []struct {
		name   string
		mutate func(*recoverability.Config)
		err    string // "" = valid
	}{
		{"valid", func(*recoverability.Config) {}, ""},
		{"no work queue", func(c *recoverability.Config) { c.WorkQueue = "" }, "WorkQueue is required: the topic the handler consumes"},
		{"deferred queue with a space", func(c *recoverability.Config) { c.DeferredQueue = "orders deferred" },
			`DeferredQueue "orders deferred" contains whitespace or a control character`},
		{"deferred queue of any name", func(c *recoverability.Config) { c.DeferredQueue = "server-inbox-deferred" }, ""},
		{"no deferred queue, a subscriber", func(c *recoverability.Config) { c.DeferredQueue = "" },
			"DeferredQueue is required with a Subscriber"},
		{"no deferred queue, no subscriber", func(c *recoverability.Config) { c.DeferredQueue, c.Subscriber = "", nil }, ""},
		{"maximum failure count", func(c *recoverability.Config) { c.MaximumFailureCount = 10 }, ""},
		{"negative maximum failure count", func(c *recoverability.Config) { c.MaximumFailureCount = -1 }, "MaximumFailureCount must not be negative, got -1"},
		{"no publisher", func(c *recoverability.Config) { c.Publisher = nil }, "Publisher is required"},
		{"no subscriber", func(c *recoverability.Config) { c.Subscriber = nil }, `Subscriber is required to consume the deferred queue "orders.Deferred.test-1"`},
		{"negative immediate retries", func(c *recoverability.Config) { c.ImmediateRetries = -1 }, "ImmediateRetries must not be negative, got -1"},
		{"negative delay", func(c *recoverability.Config) {
			c.DurationToIgnoreOnFailure = []time.Duration{time.Second, -time.Second}
		},
			"DurationToIgnoreOnFailure[1] must not be negative, got -1s"},
		{"zero delay", func(c *recoverability.Config) { c.DurationToIgnoreOnFailure = []time.Duration{0} }, ""},
		{"error queue is work queue", func(c *recoverability.Config) { c.ErrorQueue = "orders" }, `ErrorQueue and WorkQueue are both "orders"`},
		{"deferred queue is work queue", func(c *recoverability.Config) { c.WorkQueue = "orders.Deferred.test-1" },
			`the deferred queue "orders.Deferred.test-1" must differ from the work and error queues`},
		{"deferred queue is error queue", func(c *recoverability.Config) { c.ErrorQueue = "orders.Deferred.test-1" },
			`the deferred queue "orders.Deferred.test-1" must differ from the work and error queues`},
		{"negative hold", func(c *recoverability.Config) { c.MaxDeferredHold = -time.Second }, "MaxDeferredHold must not be negative, got -1s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := baseConfig(ps)
			c.mutate(&cfg)
			_, err := recoverability.New(cfg, watermill.NopLogger{})
			if c.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, recoverability.ErrInvalidConfig)
			require.ErrorContains(t, err, c.err)
		})
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want time.Duration
		err  string // "" = valid
	}{
		{"10s", 10 * time.Second, ""},
		{"1m30s", 90 * time.Second, ""},
		{"500ms", 500 * time.Millisecond, ""},
		{"00:00:10", 10 * time.Second, ""},
		{"00:01:00", time.Minute, ""},
		{"01:30", 90 * time.Minute, ""},
		{"1.02:03:04", 26*time.Hour + 3*time.Minute + 4*time.Second, ""},
		{"1:02:03:04", 26*time.Hour + 3*time.Minute + 4*time.Second, ""},
		{"00:00:00.500", 500 * time.Millisecond, ""},
		{"00:00:01.0000001", time.Second + 100*time.Nanosecond, ""},
		{" 00:00:10 ", 10 * time.Second, ""},
		{"-00:00:10", -10 * time.Second, ""},
		{"-10s", -10 * time.Second, ""},
		{"00:61:00", 0, "minutes must be 0 to 59"},
		{"24:00:00", 0, "hours must be 0 to 23"},
		{"00:00:60", 0, "seconds must be 0 to 59"},
		{"00:00:00.12345678", 0, "fractions of a second take 1 to 7 digits"},
		{"00:00:10.", 0, "fractions of a second take 1 to 7 digits"},
		{"1:2:3:4:5", 0, "at most four parts"},
		{"ab:00:00", 0, "hours must be 1 to 2 digits"},
		{"99999999.00:00:00", 0, "days must be 0 to 106751"},
		{"106751.23:59:59", 0, "longer than Go's largest duration"},
		{"10", 0, "a number needs a unit"},
		{"ten seconds", 0, `write a Go duration such as "10s"`},
		{"", 0, "it is empty"},
	}
	for _, c := range cases {
		got, err := recoverability.ParseDuration(c.in)
		if c.err == "" {
			require.NoError(t, err, c.in)
			require.Equal(t, c.want, got, c.in)
			continue
		}
		require.ErrorIs(t, err, recoverability.ErrInvalidDuration, c.in)
		require.ErrorContains(t, err, c.err, c.in)
	}
}

func TestReadConfigInShuttlesShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		file  string
		check func(t *testing.T, c recoverability.Config)
		err   string // "" = valid
	}{
		{
			name: "Shuttle's documented section, whole file",
			file: `{"Shuttle": {"ServiceBus": {"Inbox": {
				"WorkQueueUri": "queue://configuration/server-inbox-work",
				"ErrorQueueUri": "queue://configuration/error",
				"ThreadCount": 25,
				"DurationToIgnoreOnFailure": ["00:00:10", "00:00:30", "00:01:00"]}}}, "Logging": {}}`,
			check: func(t *testing.T, c recoverability.Config) {
				require.Equal(t, "server-inbox-work", c.WorkQueue)
				require.Equal(t, "error", c.ErrorQueue)
				require.Equal(t, []time.Duration{10 * time.Second, 30 * time.Second, time.Minute}, c.DurationToIgnoreOnFailure)
				require.Equal(t, "from-code", c.DeferredQueue, "left as the code set it")
				require.Zero(t, c.MaximumFailureCount)
			},
		},
		{
			name: "Inbox section alone, deferred queue, mixed duration forms, any key case",
			file: `{"inbox": {"workQueueUri": "orders", "deferredQueueUri": "rabbitmq://shuttle/orders.Deferred.web-2?durable=true",
				"DurationToIgnoreOnFailure": ["500ms", "00:00:00.750", "1.00:00:00"], "maximumFailureCount": 10}}`,
			check: func(t *testing.T, c recoverability.Config) {
				require.Equal(t, "orders", c.WorkQueue)
				require.Equal(t, "orders.Deferred.web-2", c.DeferredQueue)
				require.Equal(t, 10, c.MaximumFailureCount)
				require.Equal(t, []time.Duration{500 * time.Millisecond, 750 * time.Millisecond, 24 * time.Hour}, c.DurationToIgnoreOnFailure)
			},
		},
		{
			name: "empty schedule means no delayed retries; host-only URI",
			file: `{"Inbox": {"ErrorQueueUri": "queue://poison", "DurationToIgnoreOnFailure": []}}`,
			check: func(t *testing.T, c recoverability.Config) {
				require.Equal(t, "poison", c.ErrorQueue)
				require.NotNil(t, c.DurationToIgnoreOnFailure)
				require.Empty(t, c.DurationToIgnoreOnFailure)
			},
		},
		{name: "malformed TimeSpan", file: `{"Inbox": {"DurationToIgnoreOnFailure": ["00:00:10", "00:00:30", "00:61:00"]}}`,
			err: `DurationToIgnoreOnFailure[2]: "00:61:00" is not a duration: minutes must be 0 to 59`},
		{name: "negative", file: `{"Inbox": {"DurationToIgnoreOnFailure": ["-00:00:10"]}}`,
			err: `DurationToIgnoreOnFailure[0]: "-00:00:10" is negative`},
		{name: "number", file: `{"Inbox": {"DurationToIgnoreOnFailure": ["10s", 10]}}`,
			err: `DurationToIgnoreOnFailure[1]: 10 is not a duration: write it as a string, "10s" or "00:00:10"`},
		{name: "bare number string", file: `{"Inbox": {"DurationToIgnoreOnFailure": ["10"]}}`,
			err: `DurationToIgnoreOnFailure[0]: "10" is not a duration: a number needs a unit`},
		{name: "not a list", file: `{"Inbox": {"DurationToIgnoreOnFailure": "00:00:10"}}`,
			err: `DurationToIgnoreOnFailure must be a list of durations, got "00:00:10"`},
		{
			name: "a deferred queue of any name; MaximumFailureCount as a string, as .NET binds it",
			file: `{"Inbox": {"DeferredQueueUri": "queue://configuration/server-inbox-deferred", "MaximumFailureCount": "3"}}`,
			check: func(t *testing.T, c recoverability.Config) {
				require.Equal(t, "server-inbox-deferred", c.DeferredQueue)
				require.Equal(t, 3, c.MaximumFailureCount)
			},
		},
		{
			name: "Inbox keys timeoutmill does not use are ignored",
			file: `{"Shuttle": {"ServiceBus": {"Inbox": {"WorkQueueUri": "queue://configuration/work",
				"ThreadCount": 25, "DurationToSleepWhenIdle": ["00:00:00.250", "00:00:10"], "Distribute": true,
				"DistributeSendCount": 5, "DeferredMessageProcessorResetInterval": "00:05:00",
				"DeferredMessageProcessorWaitInterval": "00:00:01", "SomethingNewer": {"x": 1}}}}}`,
			check: func(t *testing.T, c recoverability.Config) {
				require.Equal(t, recoverability.Config{WorkQueue: "work", DeferredQueue: "from-code"}, c)
			},
		},
		{name: "zero MaximumFailureCount", file: `{"Inbox": {"MaximumFailureCount": 0}}`,
			err: `MaximumFailureCount must be a whole number from 1 (1: no delayed retries), got 0`},
		{name: "fractional MaximumFailureCount", file: `{"Inbox": {"MaximumFailureCount": 2.5}}`,
			err: `MaximumFailureCount must be a whole number from 1 (1: no delayed retries), got 2.5`},
		{name: "MaximumFailureCount not a number", file: `{"Inbox": {"MaximumFailureCount": "many"}}`,
			err: `MaximumFailureCount must be a whole number from 1 (1: no delayed retries), got "many"`},
		{name: "URI without a queue", file: `{"Inbox": {"WorkQueueUri": "queue://configuration/"}}`,
			err: `WorkQueueUri: "queue://configuration/" names no queue`},
		{name: "no Inbox", file: `{"Shuttle": {"ServiceBus": {}}}`, err: "no Inbox section"},
		{name: "not JSON", file: `Inbox: {}`, err: "not a JSON configuration file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := recoverability.Config{DeferredQueue: "from-code"}
			before := cfg
			err := recoverability.ReadConfig(strings.NewReader(c.file), &cfg)
			if c.err != "" {
				require.ErrorIs(t, err, recoverability.ErrInvalidConfig)
				require.ErrorContains(t, err, c.err)
				require.Equal(t, before, cfg, "a bad file changes nothing")
				return
			}
			require.NoError(t, err)
			c.check(t, cfg)
		})
	}
}

func TestLoadConfigFileThenCode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "appsettings.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"Inbox": {
		"WorkQueueUri": "queue://configuration/orders",
		"DeferredQueueUri": "queue://configuration/orders.Deferred.web-1",
		"DurationToIgnoreOnFailure": ["00:00:01", "2s"]}}`), 0o600))

	ps := newGoChannel(t)
	var cfg recoverability.Config
	require.NoError(t, recoverability.LoadConfigFile(path, &cfg))
	cfg.Publisher, cfg.Subscriber = ps, ps // what a file cannot say
	r, err := recoverability.New(cfg, nil)
	require.NoError(t, err)
	require.Equal(t, "orders", r.WorkQueue())
	require.Equal(t, "orders.Deferred.web-1", r.DeferredQueue())

	err = recoverability.LoadConfigFile(filepath.Join(t.TempDir(), "missing.json"), &cfg)
	require.ErrorIs(t, err, recoverability.ErrInvalidConfig)
	require.ErrorIs(t, err, os.ErrNotExist)

	require.NoError(t, os.WriteFile(path, []byte(`{"Inbox": {"DurationToIgnoreOnFailure": ["00:00:1x"]}}`), 0o600))
	err = recoverability.LoadConfigFile(path, &cfg)
	require.ErrorContains(t, err, path+": timeoutmill: invalid configuration: DurationToIgnoreOnFailure[0]: \"00:00:1x\" is not a duration")
}

// A Config written for the former Endpoint and Instance fields, which named the deferred queue,
// is left with a Subscriber and no DeferredQueue once they are deleted. Run as it stands it
// would have no deferred queue at all: New refuses it, naming the field to set, and runs
// nothing.
func TestAConfigWrittenForEndpointAndInstanceIsRefusedNamingDeferredQueue(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	logger := newCaptureLogger()
	old := recoverability.Config{ // was: Endpoint: "orders", Instance: "web-1",
		WorkQueue:  "orders",
		Publisher:  ps,
		Subscriber: ps,
	}
	_, err := recoverability.New(old, logger)
	require.ErrorIs(t, err, recoverability.ErrInvalidConfig)
	require.ErrorContains(t, err, "DeferredQueue is required with a Subscriber")
	require.ErrorContains(t, err, "wire.DeferredQueue(endpoint, instance)")
	require.Zero(t, logger.count(thrashingWarning), "refused, not run without a deferred queue")
	require.ErrorIs(t, old.Validate(), recoverability.ErrInvalidConfig, "Validate says the same")

	// What it meant then, it says now with DeferredQueue.
	old.DeferredQueue = wire.DeferredQueue("orders", "web-1")
	r, err := recoverability.New(old, logger)
	require.NoError(t, err)
	require.Equal(t, "orders.Deferred.web-1", r.DeferredQueue())

	// Running without a deferred queue, as Shuttle does when none is configured, is asked for
	// by leaving Subscriber nil too.
	r, err = recoverability.New(recoverability.Config{WorkQueue: "orders", Publisher: ps}, logger)
	require.NoError(t, err)
	require.Empty(t, r.DeferredQueue())
	require.Equal(t, 1, logger.count(thrashingWarning))
}
