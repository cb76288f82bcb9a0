package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// CheckInfrastructure returns nil when the store's table exists with every column this version
// reads, and an error wrapping persistence.ErrNotSetUp that names it when it does not exist or an
// older version made it (SetupInfrastructure adds what is missing; until then a claim, a peek or
// a list on it fails). It creates nothing.
func (s *Store) CheckInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	if err := s.checkTable(ctx); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// setUp creates the table, or with mustExist checks that it is there. Its errors do not name the
// backend: Open and New add it.
func (s *Store) setUp(ctx context.Context, mustExist bool) error {
	if mustExist {
		return s.checkTable(ctx)
	}
	if err := s.createTable(ctx); err != nil {
		return fmt.Errorf("set up table: %w", err)
	}
	return nil
}

func (s *Store) checkTable(ctx context.Context) error {
	exists, err := tableExists(ctx, s.reader, s.table)
	if err != nil {
		return fmt.Errorf("check table %s: %w", quoteIdent(s.table), err)
	}
	if !exists {
		return fmt.Errorf("table %s does not exist (%w)", quoteIdent(s.table), persistence.ErrNotSetUp)
	}
	var columns int
	if err := s.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?)
WHERE name IN ('dedup_key', 'parked_reason', 'claimed_by')`, s.table).Scan(&columns); err != nil {
		return fmt.Errorf("check table %s: %w", quoteIdent(s.table), err)
	}
	if columns < 3 {
		return fmt.Errorf("table %s was made by an older version: SetupInfrastructure adds its new columns (%w)",
			quoteIdent(s.table), persistence.ErrNotSetUp)
	}
	return nil
}

// tableExists looks table up in the schema. SQLite's names compare case-insensitively in ASCII,
// as COLLATE NOCASE does: CREATE TABLE IF NOT EXISTS would take "Orders" for "orders" too.
func tableExists(ctx context.Context, db *sql.DB, table string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ? COLLATE NOCASE`, table).Scan(&n)
	return n > 0, err
}

// checkPath fails, naming config.Path, where Open would fail or, with MustExist, create something:
// a missing directory, a directory in the file's place, or with MustExist a missing file or
// table. The table is looked up on a read-only connection without the store's pragmas, so that a
// file that is not a store is left exactly as it was (not even switched to WAL mode).
func checkPath(ctx context.Context, config Config) error {
	info, err := os.Stat(config.Path)
	switch {
	case err == nil && info.IsDir():
		return fmt.Errorf("sqlite: open %s: it is a directory", config.Path)
	case err == nil && config.MustExist:
		return checkFileHasTable(ctx, config)
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist) && config.MustExist:
		return fmt.Errorf("sqlite: database file %s does not exist (%w)", config.Path, persistence.ErrNotSetUp)
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(config.Path)
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sqlite: open %s: directory %s does not exist", config.Path, dir)
		}
		return nil
	default:
		return fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
}

func checkFileHasTable(ctx context.Context, config Config) error {
	db, err := sql.Open("sqlite", fileURI(config.Path)+fmt.Sprintf("?mode=ro&_pragma=busy_timeout(%d)", config.BusyTimeout.Milliseconds()))
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	defer db.Close()
	exists, err := tableExists(ctx, db, config.Table)
	if err != nil {
		return fmt.Errorf("sqlite: open %s: check table %s: %w", config.Path, quoteIdent(config.Table), err)
	}
	if !exists {
		return fmt.Errorf("sqlite: table %s does not exist in %s (%w)", quoteIdent(config.Table), config.Path, persistence.ErrNotSetUp)
	}
	return nil
}
