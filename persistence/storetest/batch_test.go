package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
)

// sqlStore is what every SQL backend of the module implements.
type sqlStore interface {
	persistence.Store
	persistence.Installer
	persistence.SetupChecker
	persistence.BatchStore
	persistence.Releaser
	persistence.Inspector
	persistence.Scheduler
	persistence.TxScheduler
}

// The backends implement the optional interfaces they document, so that the suite runs their
// subtests rather than skipping them and the manager takes their fast paths.
var (
	_ sqlStore = (*sqlite.Store)(nil)
	_ sqlStore = (*postgres.Store)(nil)
	_ sqlStore = (*mysql.Store)(nil)
	_ sqlStore = (*sqlserver.Store)(nil) // without Handover: Survey and Hide need a server to test

	_ persistence.Handover = (*sqlite.Store)(nil)
	_ persistence.Handover = (*postgres.Store)(nil)
	_ persistence.Handover = (*mysql.Store)(nil)
)

// TestMemoryImplementsTheOptionalInterfaces checks what the var block above checks of the SQL
// stores: memory.New returns a persistence.Store, so this is checked when the test runs.
func TestMemoryImplementsTheOptionalInterfaces(t *testing.T) {
	t.Parallel()
	store := memory.New()
	require.Implements(t, (*persistence.Handover)(nil), store)
	require.Implements(t, (*persistence.BatchStore)(nil), store)
	require.Implements(t, (*persistence.Inspector)(nil), store)
	require.Implements(t, (*persistence.Scheduler)(nil), store)
	require.Implements(t, (*persistence.Releaser)(nil), store)
	require.Implements(t, (*persistence.Claimer)(nil), store)
	require.Implements(t, (*persistence.Parker)(nil), store)
}
