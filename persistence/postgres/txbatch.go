package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// Querier runs a statement: a *sql.DB, a *sql.Conn or a *sql.Tx on the store's database.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// RemoveManyWith deletes the timeouts with those ids and, in the same statement, so that both
// commit together or neither does, runs the data-modifying statements in with, which may read
// the deleted ids from the table expression "removed" (one text column, id). args are their bind
// parameters, numbered from $2 ($1 is ids). It returns the ids it deleted; the others were gone
// already. An exactly-once forwarder inserts the messages of exactly the deleted timeouts this
// way, in one round trip: a timeout that another transaction deletes at the same moment waits
// for it, and is deleted, and its message inserted, by only one of them. q runs the statement: the
// store's pool (DB) for a transaction of its own, or a transaction of the caller's. The store's
// table is named with its schema, so q may use any search_path.
func (s *Store) RemoveManyWith(ctx context.Context, q Querier, ids []string, with []string, args ...any) ([]string, error) {
	if err := sqlstore.Opened(s.c()); err != nil {
		return nil, err
	}
	if q == nil {
		return nil, errors.New("postgres: remove: no database to run on")
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`WITH removed AS (DELETE FROM ` + s.q.table + ` WHERE id = ANY($1) RETURNING id)`)
	for i, w := range with {
		b.WriteString(", with" + strconv.Itoa(i) + " AS (" + w + ")")
	}
	b.WriteString(" SELECT id FROM removed")
	removed, err := sqlstore.QueryIDs(ctx, q, b.String(), append([]any{ids}, args...))
	if err != nil {
		return nil, fmt.Errorf("postgres: remove %d timeouts: %w", len(ids), err)
	}
	return removed, nil
}
