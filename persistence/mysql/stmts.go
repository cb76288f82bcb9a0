package mysql

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// statements prepares each of the store's fixed statements once and keeps it. Without them the
// driver prepares, executes and closes every statement that has arguments (two round trips);
// kept statements take one, which BenchmarkPeek shows. They are
// prepared on first use, not in New, since preparing needs the table SetupInfrastructure makes.
type statements struct {
	db     *sql.DB
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	closed bool
}

func newStatements(db *sql.DB) *statements {
	return &statements{db: db, stmts: make(map[string]*sql.Stmt)}
}

// get returns query prepared. database/sql prepares it again on each connection it runs on.
func (s *statements) get(ctx context.Context, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("store is closed")
	}
	if stmt, ok := s.stmts[query]; ok {
		return stmt, nil
	}
	stmt, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.stmts[query] = stmt
	return stmt, nil
}

// exec runs a kept statement.
func (s *statements) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	stmt, err := s.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return stmt.ExecContext(ctx, args...)
}

// queryRow runs a kept statement that returns one row.
func (s *statements) queryRow(ctx context.Context, query string, args ...any) (*sql.Row, error) {
	stmt, err := s.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return stmt.QueryRowContext(ctx, args...), nil
}

func (s *statements) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var err error
	for _, stmt := range s.stmts {
		err = errors.Join(err, stmt.Close())
	}
	clear(s.stmts)
	return err
}
