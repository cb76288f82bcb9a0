package sqlserver

import (
	"context"
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// CheckInfrastructure returns nil when the store's table exists with every column this version
// reads, and an error wrapping persistence.ErrNotSetUp that names it when the table or its schema
// does not exist or an older version made it (SetupInfrastructure adds what is missing; until
// then a claim, a peek or a list on it fails). It creates nothing.
func (s *Store) CheckInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	var tables, current int
	if err := s.db.QueryRowContext(ctx, s.q.tableExists()).Scan(&tables, &current); err != nil {
		return fmt.Errorf("sqlserver: check %s: %w", s.q.table, err)
	}
	if tables == 0 {
		return fmt.Errorf("sqlserver: table %s does not exist (%w)", s.q.table, persistence.ErrNotSetUp)
	}
	if current == 0 {
		return fmt.Errorf("sqlserver: table %s was made by an older version: SetupInfrastructure adds its new columns (%w)",
			s.q.table, persistence.ErrNotSetUp)
	}
	return nil
}

// tableExists counts the store's table: 1 when it exists, 0 when it (or its schema) does not;
// and says whether it has the columns the last version added (1) or not (0).
func (q queries) tableExists() string {
	return fmt.Sprintf(`SELECT COUNT(*), CASE WHEN COL_LENGTH(%[1]s, 'ParkedReason') IS NULL THEN 0 ELSE 1 END
FROM sys.objects WHERE object_id = OBJECT_ID(%[1]s) AND type IN ('U')`, quoteString(q.table))
}
