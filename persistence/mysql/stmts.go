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
//
// As a sqlstore.Querier it runs the statements it keeps prepared, and the others (the batch
// statements, made for each number of ids, and the operators' reads) on the pool.
type statements struct {
	db     *sql.DB
	keep   map[string]bool
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	closed bool
}

func newStatements(db *sql.DB) *statements {
	return &statements{db: db, keep: map[string]bool{}, stmts: make(map[string]*sql.Stmt)}
}

// keepOnly says which statements to keep prepared, before the store runs any.
func (s *statements) keepOnly(keep ...string) {
	for _, q := range keep {
		s.keep[q] = true
	}
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

// ExecContext runs a statement, prepared when it is one to keep.
func (s *statements) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if !s.keep[query] {
		return s.db.ExecContext(ctx, query, args...)
	}
	stmt, err := s.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return stmt.ExecContext(ctx, args...)
}

// QueryContext runs a query, prepared when it is one to keep.
func (s *statements) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if !s.keep[query] {
		return s.db.QueryContext(ctx, query, args...)
	}
	stmt, err := s.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return stmt.QueryContext(ctx, args...)
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
