package mysql

import (
	"context"
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// CheckInfrastructure returns nil when the store's table exists with every column this version
// reads, and an error wrapping persistence.ErrNotSetUp that names it when it does not exist or
// an older version made it (SetupInfrastructure adds what is missing; until then a claim, a peek
// or a list on it fails). It creates nothing.
func (s *Store) CheckInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, s.q.tableExists)
	switch {
	case err == nil:
		return nil
	case isServerError(err, errNoSuchTable):
		return fmt.Errorf("mysql: table %s does not exist (%w)", s.q.table, persistence.ErrNotSetUp)
	case isServerError(err, errBadField):
		return fmt.Errorf("mysql: table %s was made by an older version: SetupInfrastructure adds its new columns (%w)",
			s.q.table, persistence.ErrNotSetUp)
	default:
		return fmt.Errorf("mysql: check %s: %w", s.q.table, err)
	}
}
