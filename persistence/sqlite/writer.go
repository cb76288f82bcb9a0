package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = errors.New("sqlite: store is closed")

// maxGroup bounds how many changes one transaction commits, so that one group holds SQLite's
// write lock (which other processes on the file wait for) for milliseconds, not longer.
const maxGroup = 128

// execer is what a change runs its statements on: the database, or the group's transaction.
type execer = sqlstore.Querier

// change is one Store, ClaimDue, Remove, ... waiting to be written. run may be called twice (in
// the group's transaction, then alone if the group failed), so it must set its results afresh.
type change struct {
	ctx  context.Context
	run  func(ctx context.Context, db execer) error
	done chan error
}

// writer makes every change to the table from one goroutine. Changes that arrive while a commit
// runs are committed together in one transaction (group commit): each commit appends to the WAL
// (and, with Synchronous FULL, syncs it), so a group costs about what one change costs alone.
type writer struct {
	db      *sql.DB
	prep    *prepared
	changes chan *change
	closing chan struct{}
	stopped chan struct{}
	group   []*change
	// wantCheckpoint asks the writer to checkpoint between two groups: the checkpointer sets it
	// when the WAL has grown past walResetPages.
	wantCheckpoint atomic.Bool
}

func newWriter(db *sql.DB) *writer {
	w := &writer{
		db:      db,
		prep:    &prepared{},
		changes: make(chan *change),
		closing: make(chan struct{}),
		stopped: make(chan struct{}),
		group:   make([]*change, 0, maxGroup),
	}
	go w.loop()
	return w
}

// do runs a change and returns its error. A change whose caller gave up (ctx done) while it was
// being committed may still be committed; every change the store makes is safe to repeat.
func (w *writer) do(ctx context.Context, run func(ctx context.Context, db execer) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &change{ctx: ctx, run: run, done: make(chan error, 1)}
	select {
	case w.changes <- c:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.closing:
		return ErrClosed
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops the writer once the group it is committing is done.
func (w *writer) close() {
	close(w.closing)
	<-w.stopped
}

func (w *writer) loop() {
	defer close(w.stopped)
	for {
		select {
		case c := <-w.changes:
			w.group = append(w.group[:0], c)
		case <-w.closing:
			return
		}
	gather:
		for len(w.group) < maxGroup {
			select {
			case c := <-w.changes:
				w.group = append(w.group, c)
			default:
				break gather
			}
		}
		w.commit(w.group)
		clear(w.group)
		if w.wantCheckpoint.Swap(false) {
			// Most pages were copied by the checkpointer: this copies those committed since,
			// and the next transaction starts the WAL over. A failure loses nothing (see
			// checkpointer.loop).
			_, _ = checkpoint(context.Background(), w.db)
		}
	}
}

// commit makes a group of changes in one transaction. If any of them fails, the transaction is
// rolled back and each change is made alone, so that one change's error is its own.
func (w *writer) commit(group []*change) {
	live := group[:0]
	for _, c := range group {
		if err := c.ctx.Err(); err != nil {
			c.done <- err
			continue
		}
		live = append(live, c)
	}
	if len(live) == 1 {
		live[0].done <- live[0].run(live[0].ctx, w.pool())
		return
	}
	if len(live) == 0 {
		return
	}
	// The group's statements run whatever happens to any one caller's context, so that one
	// caller giving up does not fail the others.
	if err := w.commitTogether(context.Background(), live); err == nil {
		for _, c := range live {
			c.done <- nil
		}
		return
	}
	for _, c := range live {
		c.done <- c.run(c.ctx, w.pool())
	}
}

func (w *writer) commitTogether(ctx context.Context, group []*change) error {
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	q := querier{p: w.prep, tx: tx}
	for _, c := range group {
		if err := c.run(ctx, q); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// pool runs a change that is alone in its group: each statement commits by itself.
func (w *writer) pool() querier { return querier{p: w.prep, db: w.db} }
