package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	// The pgx database/sql driver, registered as "pgx".
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

// pgSchema is a schema of its own on the run's PostgreSQL, dropped with all it holds by drop.
type pgSchema struct {
	db   *sql.DB
	name string
}

func newSchema(ctx context.Context, dsn string) (*pgSchema, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening PostgreSQL: %w", err)
	}
	db.SetMaxOpenConns(4)
	s := &pgSchema{db: db, name: "tb_" + strings.ToLower(watermill.NewShortUUID())}
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+quote(s.name)); err != nil {
		return nil, errors.Join(fmt.Errorf("creating schema %s: %w", s.name, err), db.Close())
	}
	return s, nil
}

// drop drops the schema and everything in it, then closes the pool.
func (s *pgSchema) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.db.ExecContext(ctx, `DROP SCHEMA `+quote(s.name)+` CASCADE`)
	if err != nil {
		err = fmt.Errorf("dropping schema %s: %w", s.name, err)
	}
	return errors.Join(err, s.db.Close())
}

// store opens the timeoutmill PostgreSQL store of endpoint in the schema, with its table.
func (s *pgSchema) store(ctx context.Context, dsn, endpoint string) (*postgres.Store, error) {
	store, err := postgres.Open(ctx, postgres.Config{DSN: dsn, Schema: s.name, Endpoint: endpoint})
	if err != nil {
		return nil, fmt.Errorf("opening the PostgreSQL store: %w", err)
	}
	if err := store.SetupInfrastructure(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("creating the store's table: %w", err), store.Close())
	}
	return store, nil
}

func quote(ident string) string {
	return `"` + strings.ReplaceAll(ident, `"`, `""`) + `"`
}
