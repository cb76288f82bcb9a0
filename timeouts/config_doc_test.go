package timeouts_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// fieldDocs returns the documentation of each field of the struct type name in file.
func fieldDocs(t *testing.T, file, name string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	require.NoError(t, err)
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != name {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			for _, id := range field.Names {
				docs[id.Name] = field.Doc.Text()
			}
		}
		return false
	})
	require.NotEmpty(t, docs)
	return docs
}

// Every refusal of NewManager is one its field's documentation states, and every refusal a
// field's documentation states is one NewManager makes: an error wrapping ErrInvalidConfig that
// names the field.
func TestEachConfigFieldSaysWhatNewManagerRefuses(t *testing.T) {
	t.Parallel()
	docs := fieldDocs(t, "config.go", "Config")
	acking := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer acking.Close()
	notAcking := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer notAcking.Close()
	var nilGoChannel *gochannel.GoChannel

	refused := map[string][]func(*timeouts.Config){
		"Endpoint":        {func(c *timeouts.Config) { c.Endpoint = "" }, func(c *timeouts.Config) { c.Endpoint = ".orders" }},
		"Store":           {func(c *timeouts.Config) { c.Store = nil }, func(c *timeouts.Config) { c.Store = &sqlite.Store{} }},
		"Publisher":       {func(c *timeouts.Config) { c.Publisher = nil }, func(c *timeouts.Config) { c.Publisher = nilGoChannel }, func(c *timeouts.Config) { c.Publisher = notAcking }},
		"Subscriber":      {func(c *timeouts.Config) { c.Subscriber = nil }, func(c *timeouts.Config) { c.Subscriber = nilGoChannel }},
		"ErrorQueue":      {func(c *timeouts.Config) { c.ErrorQueue = "dead letters" }},
		"PollInterval":    {func(c *timeouts.Config) { c.PollInterval = -time.Second }},
		"ClaimBatchSize":  {func(c *timeouts.Config) { c.ClaimBatchSize = -1 }},
		"AnnouncementIDs": {func(c *timeouts.Config) { c.AnnouncementIDs = -1 }, func(c *timeouts.Config) { c.AnnouncementIDs = 1001 }},
		"ClaimLease":      {func(c *timeouts.Config) { c.ClaimLease = -time.Second }},
		"NumberOfRetries": {func(c *timeouts.Config) { c.NumberOfRetries = -1 }},
		"TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages": {func(c *timeouts.Config) {
			c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = -time.Second
		}},
		"TimeToTriggerFetchCircuitBreaker": {func(c *timeouts.Config) { c.TimeToTriggerFetchCircuitBreaker = -time.Second }, func(c *timeouts.Config) {
			c.TimeToTriggerFetchCircuitBreaker, c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = time.Minute, 2*time.Minute
		}},
		"TimeToTriggerStoreCircuitBreaker":    {func(c *timeouts.Config) { c.TimeToTriggerStoreCircuitBreaker = -time.Second }},
		"TimeToTriggerDispatchCircuitBreaker": {func(c *timeouts.Config) { c.TimeToTriggerDispatchCircuitBreaker = -time.Second }},
		"MaximumRecoveryFailuresPerSecond":    {func(c *timeouts.Config) { c.MaximumRecoveryFailuresPerSecond = -1 }},
		"RetryDelay":                          {func(c *timeouts.Config) { c.RetryDelay = -time.Second }},
		"CallTimeout":                         {func(c *timeouts.Config) { c.CallTimeout = -time.Second }},
		"Instance":                            {func(c *timeouts.Config) { c.Instance = "web\n1" }, func(c *timeouts.Config) { c.Instance = " " }},
		"Clock":                               {func(c *timeouts.Config) { c.Clock = (*pointerClock)(nil) }},
		"ClockSkewAlarm":                      {func(c *timeouts.Config) { c.ClockSkewAlarm = -time.Second }},
	}
	for field, doc := range docs {
		mutations, ok := refused[field]
		if !ok {
			require.NotContains(t, strings.ToLower(doc), "refused", "%s's documentation states a refusal this test does not try", field)
			continue
		}
		require.Contains(t, strings.ToLower(doc), "refused", "%s's documentation must say what NewManager refuses", field)
		for i, mutate := range mutations {
			cfg := timeouts.Config{Endpoint: "orders", Store: memory.New(), Publisher: acking, Subscriber: acking}
			mutate(&cfg)
			_, err := timeouts.NewManager(cfg, nil)
			require.ErrorIs(t, err, timeouts.ErrInvalidConfig, "%s #%d", field, i)
			require.Contains(t, err.Error(), field, "%s #%d: the error names the field", field, i)
		}
	}
	for field := range refused {
		require.Contains(t, docs, field, "no such field")
	}
}

// pointerClock is a Clock with a pointer receiver, for a nil one.
type pointerClock struct{}

func (*pointerClock) Now() time.Time { return time.Now() }
