package postgres

import (
	"context"
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// CheckInfrastructure returns nil when the store's table exists with every column this version
// reads, and an error wrapping persistence.ErrNotSetUp that names it when the table or its schema
// does not exist, or when an older version made it (SetupInfrastructure adds what is missing;
// until then a claim, a peek or a list on it fails). It creates nothing and needs no right on the
// table.
func (s *Store) CheckInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	var (
		exists, counted bool
		columns         int
	)
	err := sqlstore.DB(s.core).QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL,
	(SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1)
		AND attname IN ('dedup_key', 'parked_reason', 'claimed_by') AND NOT attisdropped),
	`+s.q.counts.installed(), s.q.table).Scan(&exists, &columns, &counted)
	if err != nil {
		return fmt.Errorf("postgres: check %s: %w", s.q.table, err)
	}
	if !exists {
		return fmt.Errorf("postgres: table %s does not exist (%w)", s.q.table, persistence.ErrNotSetUp)
	}
	if columns < 3 || !counted {
		return fmt.Errorf("postgres: table %s was made by an older version: SetupInfrastructure adds its new columns and counts (%w)",
			s.q.table, persistence.ErrNotSetUp)
	}
	return nil
}
