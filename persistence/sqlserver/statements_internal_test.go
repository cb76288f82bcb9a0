package sqlserver

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// TestStatementsCompile: every statement the core runs takes exactly the @names of its
// parameters, for the default names and for hostile ones; a name misspelt fails New, not a
// statement on a server ("Must declare the scalar variable").
func TestStatementsCompile(t *testing.T) {
	t.Parallel()
	for name, config := range goldenCases() {
		config.setDefaults()
		require.NoError(t, config.Validate())
		_, err := newStore(nil, false, config)
		require.NoError(t, err, name)
	}
	s := &Store{q: queriesFor(t, Config{Endpoint: ordersEndpoint})}
	s.q.reschedule = strings.Replace(s.q.reschedule, "@now", "@nw", 1)
	_, err := sqlstore.New(s.dialect())
	require.ErrorContains(t, err, "@nw")
}
