package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// CountOwners counts exactly the pending timeouts of the limit owners with the most, and of no
// owner (persistence.OwnerCounter). The count triggers keep them: each statement that stores or
// removes timeouts appends one row per owner to a table of deltas, and a fold (this call's, or
// Stats') adds them into a table of one row per owner, indexed by count. It reads, in one
// snapshot, the deltas not yet folded (K owners), the limit + K + 1 owners with the most by that
// index, and the folded rows of the K owners: an owner among the true top limit is either one
// of the K or has no delta, and then no more than limit + K owners are ahead of it in the index.
// Its cost grows with limit and the deltas, not with the timeouts or the owners.
func (s *Store) CountOwners(ctx context.Context, limit int) (persistence.OwnerCounts, error) {
	if err := sqlstore.Opened(s.c()); err != nil {
		return persistence.OwnerCounts{}, err
	}
	db := sqlstore.DB(s.core)
	if err := fold(ctx, db, s.q.counts.foldOwners); err != nil {
		return persistence.OwnerCounts{}, fmt.Errorf("postgres: count owners: %w", err)
	}
	counts, err := s.q.counts.readOwners(ctx, db, max(limit, 0))
	if err != nil {
		return persistence.OwnerCounts{}, fmt.Errorf("postgres: count owners: %w", notSetUp(err))
	}
	return counts, nil
}

// readOwners reads the owners' counts in one snapshot (REPEATABLE READ): a fold that commits
// meanwhile moves deltas into the owners' rows in one transaction, and is seen whole or not.
func (c counts) readOwners(ctx context.Context, db *sql.DB, limit int) (persistence.OwnerCounts, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return persistence.OwnerCounts{}, err
	}
	defer tx.Rollback() //nolint:errcheck // read only: nothing to keep
	n := map[string]int{}
	deltas := []string{""} // no owner is always read
	if err := scanOwners(ctx, tx, c.ownerDeltasRead, func(owner string, d int) {
		n[owner] += d
		if owner != "" {
			deltas = append(deltas, owner)
		}
	}); err != nil {
		return persistence.OwnerCounts{}, err
	}
	folded := func(owner string, k int) { n[owner] += k }
	if err := scanOwners(ctx, tx, c.ownersOf, folded, deltas); err != nil {
		return persistence.OwnerCounts{}, err
	}
	seen := map[string]bool{}
	for _, o := range deltas {
		seen[o] = true
	}
	if err := scanOwners(ctx, tx, c.topOwners, func(owner string, k int) {
		if !seen[owner] { // the deltas' owners are read already
			n[owner] += k
		}
	}, limit+len(deltas)); err != nil {
		return persistence.OwnerCounts{}, err
	}
	out := persistence.OwnerCounts{NoOwner: n[""], Top: []persistence.OwnerCount{}}
	for owner, k := range n {
		if owner != "" && k > 0 {
			out.Top = append(out.Top, persistence.OwnerCount{Owner: owner, Count: k})
		}
	}
	slices.SortFunc(out.Top, func(a, b persistence.OwnerCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Owner, b.Owner))
	})
	out.Top = out.Top[:min(limit, len(out.Top))]
	return out, nil
}

// scanOwners runs query, whose rows are (owner, count), and passes each row to f.
func scanOwners(ctx context.Context, tx *sql.Tx, query string, f func(owner string, n int), args ...any) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			owner string
			n     int
		)
		if err := rows.Scan(&owner, &n); err != nil {
			return err
		}
		f(owner, n)
	}
	return rows.Err()
}

var _ persistence.OwnerCounter = (*Store)(nil)
