package storetest

import (
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
	"github.com/timeoutmill/timeoutmill/satellites"
)

var (
	// The suite's batchStore is satellites.BatchStore: each has the other's methods.
	_ batchStore            = satellites.BatchStore(nil)
	_ satellites.BatchStore = batchStore(nil)

	// The satellites store and dispatch in batches on these stores, and the Batch subtest runs
	// on them rather than skipping.
	_ satellites.BatchStore = (*memory.Store)(nil)
	_ satellites.BatchStore = (*sqlite.Store)(nil)
	_ satellites.BatchStore = (*postgres.Store)(nil)
	_ satellites.BatchStore = (*mysql.Store)(nil)
	_ satellites.BatchStore = (*sqlserver.Store)(nil)
)
