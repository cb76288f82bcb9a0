package recoverability_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/recoverability"
)

// Every field of Config says what New refuses, and New refuses it: an error wrapping
// ErrInvalidConfig that names the field.
func TestEachConfigFieldSaysWhatNewRefuses(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	require.NoError(t, err)
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Config" {
			for _, field := range ts.Type.(*ast.StructType).Fields.List {
				for _, id := range field.Names {
					docs[id.Name] = field.Doc.Text()
				}
			}
			return false
		}
		return true
	})
	require.NotEmpty(t, docs)

	ps := newGoChannel(t)
	refused := map[string][]func(*recoverability.Config){
		"WorkQueue": {func(c *recoverability.Config) { c.WorkQueue = "" }},
		"DeferredQueue": {
			func(c *recoverability.Config) { c.DeferredQueue = "orders deferred" },
			func(c *recoverability.Config) { c.DeferredQueue = c.WorkQueue },
			func(c *recoverability.Config) { c.DeferredQueue = "" }, // with a Subscriber
		},
		"ErrorQueue":       {func(c *recoverability.Config) { c.ErrorQueue = "dead letters" }, func(c *recoverability.Config) { c.ErrorQueue = c.WorkQueue }},
		"ImmediateRetries": {func(c *recoverability.Config) { c.ImmediateRetries = -1 }},
		"DurationToIgnoreOnFailure": {func(c *recoverability.Config) {
			c.DurationToIgnoreOnFailure = []time.Duration{time.Second, -time.Second}
		}},
		"MaximumFailureCount": {func(c *recoverability.Config) { c.MaximumFailureCount = -1 }},
		"Publisher":           {func(c *recoverability.Config) { c.Publisher = nil }},
		"Subscriber":          {func(c *recoverability.Config) { c.Subscriber = nil }},
		"MaxDeferredHold":     {func(c *recoverability.Config) { c.MaxDeferredHold = -time.Second }},
	}
	// The error names the field, or for a queue that collides with another, the queue.
	names := map[string][]string{"DeferredQueue": {"DeferredQueue", "deferred queue"}}
	for field, doc := range docs {
		mutations, ok := refused[field]
		if !ok {
			require.NotContains(t, doc, "refuse", "%s's documentation states a refusal this test does not try", field)
			continue
		}
		require.Contains(t, doc, "New refuses", "%s's documentation must say what New refuses", field)
		for i, mutate := range mutations {
			cfg := baseConfig(ps)
			mutate(&cfg)
			_, err := recoverability.New(cfg, watermill.NopLogger{})
			require.ErrorIs(t, err, recoverability.ErrInvalidConfig, "%s #%d", field, i)
			want := names[field]
			if want == nil {
				want = []string{field}
			}
			named := false
			for _, w := range want {
				named = named || strings.Contains(err.Error(), w)
			}
			require.True(t, named, "%s #%d: the error names the field: %v", field, i, err)
		}
	}
	for field := range refused {
		require.Contains(t, docs, field, "no such field")
	}
}
