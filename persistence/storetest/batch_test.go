package storetest

import (
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

	_ persistence.Handover   = (*sqlite.Store)(nil)
	_ persistence.Handover   = (*postgres.Store)(nil)
	_ persistence.Handover   = (*mysql.Store)(nil)
	_ persistence.Handover   = (*memory.Store)(nil)
	_ persistence.BatchStore = (*memory.Store)(nil)
	_ persistence.Inspector  = (*memory.Store)(nil)
	_ persistence.Scheduler  = (*memory.Store)(nil)
)
