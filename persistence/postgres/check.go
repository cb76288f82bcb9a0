package postgres

import (
	"context"
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// CheckInfrastructure returns nil when the store's table exists, and an error wrapping
// persistence.ErrNotSetUp that names it when the table or its schema does not. It creates
// nothing and needs no right on the table.
func (s *Store) CheckInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	var exists bool
	err := sqlstore.DB(s.core).QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.q.table).Scan(&exists)
	if err != nil {
		return fmt.Errorf("postgres: check %s: %w", s.q.table, err)
	}
	if !exists {
		return fmt.Errorf("postgres: table %s does not exist (%w)", s.q.table, persistence.ErrNotSetUp)
	}
	return nil
}
