package sqlserver

import (
	"context"
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// CheckInfrastructure returns nil when the store's table exists, and an error wrapping
// persistence.ErrNotSetUp that names it when the table or its schema does not. It creates
// nothing.
func (s *Store) CheckInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	var tables int
	if err := s.db.QueryRowContext(ctx, s.q.tableExists()).Scan(&tables); err != nil {
		return fmt.Errorf("sqlserver: check %s: %w", s.q.table, err)
	}
	if tables == 0 {
		return fmt.Errorf("sqlserver: table %s does not exist (%w)", s.q.table, persistence.ErrNotSetUp)
	}
	return nil
}

// tableExists counts the store's table: 1 when it exists, 0 when it (or its schema) does not.
func (q queries) tableExists() string {
	return fmt.Sprintf(`SELECT COUNT(*) FROM sys.objects WHERE object_id = OBJECT_ID(%s) AND type IN ('U')`, quoteString(q.table))
}
