package storetest

import (
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
)

var (
	// The timeout manager store and dispatch in batches on these stores, and the Batch subtest runs
	// on them rather than skipping.
	_ persistence.BatchStore = (*memory.Store)(nil)
	_ persistence.BatchStore = (*sqlite.Store)(nil)
	_ persistence.BatchStore = (*postgres.Store)(nil)
	_ persistence.BatchStore = (*mysql.Store)(nil)
	_ persistence.BatchStore = (*sqlserver.Store)(nil)
)
