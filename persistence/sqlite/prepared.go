package sqlite

import (
	"context"
	"database/sql"
	"errors"
)

// prepared holds the statements the store runs most, each prepared once on a pool. SQLite parses
// a statement's text on every call that does not reuse a prepared one, and for a claim, a
// batch's IN list or a row's INSERT the parse costs about as much as the work.
//
// The statements are prepared when the store opens, never while it runs: the writer's pool has
// one connection, which a group's transaction holds, so a statement prepared later would wait
// for it. database/sql prepares each again, once, on every other connection of its pool that
// runs it.
type prepared struct {
	// stmts is filled by prepare before the store is returned and only read after.
	stmts map[string]*sql.Stmt
}

// prepare prepares queries on db.
func (p *prepared) prepare(ctx context.Context, db *sql.DB, queries ...string) error {
	if p.stmts == nil {
		p.stmts = make(map[string]*sql.Stmt, len(queries))
	}
	for _, q := range queries {
		if _, ok := p.stmts[q]; ok {
			continue
		}
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		p.stmts[q] = st
	}
	return nil
}

func (p *prepared) close() error {
	var err error
	for _, st := range p.stmts {
		err = errors.Join(err, st.Close())
	}
	return err
}

// querier runs statements on a pool, or on a transaction of it (tx set), the prepared ones
// through their prepared statement.
type querier struct {
	p  *prepared
	db *sql.DB
	tx *sql.Tx
}

func (q querier) stmt(ctx context.Context, query string) *sql.Stmt {
	st := q.p.stmts[query]
	if st != nil && q.tx != nil {
		return q.tx.StmtContext(ctx, st) // closed when the transaction ends
	}
	return st
}

func (q querier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := q.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	if q.tx != nil {
		return q.tx.ExecContext(ctx, query, args...)
	}
	return q.db.ExecContext(ctx, query, args...)
}

func (q querier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	if q.tx != nil {
		return q.tx.QueryContext(ctx, query, args...)
	}
	return q.db.QueryContext(ctx, query, args...)
}
