package sqlite

import (
	"context"
	"database/sql"
	"time"
)

const (
	// checkpointEvery is how often the checkpointer copies the WAL into the database file.
	checkpointEvery = 100 * time.Millisecond
	// walResetPages is the size of the WAL, in pages, from which the writer finishes the
	// checkpoint itself, so that its next transaction starts the WAL over: under a steady stream
	// of commits, a checkpoint on another connection never catches up with the last one.
	walResetPages = 4096
	// walLimitBytes is what SQLite truncates the WAL file to once it starts over
	// (journal_size_limit): a burst's WAL does not keep its disk space.
	walLimitBytes = 64 << 20
)

// checkpointer copies the WAL into the database file from a goroutine and a connection of its
// own. Open turns SQLite's automatic checkpoint off on the writer's connection, where it would
// run inside whichever Store or ClaimDue committed the page that crossed its threshold and make
// that call wait for the copy and its fsyncs. A PASSIVE checkpoint takes no lock that the
// writer or the readers wait for.
type checkpointer struct {
	db      *sql.DB
	w       *writer
	closing chan struct{}
	stopped chan struct{}
}

func newCheckpointer(db *sql.DB, w *writer) *checkpointer {
	c := &checkpointer{db: db, w: w, closing: make(chan struct{}), stopped: make(chan struct{})}
	go c.loop()
	return c
}

// close stops the checkpointer once its checkpoint is done. SQLite checkpoints the WAL when the
// last connection to the file closes.
func (c *checkpointer) close() {
	close(c.closing)
	<-c.stopped
}

func (c *checkpointer) loop() {
	defer close(c.stopped)
	tick := time.NewTicker(checkpointEvery)
	defer tick.Stop()
	for {
		select {
		case <-c.closing:
			return
		case <-tick.C:
		}
		// A failed checkpoint loses nothing: the pages stay in the WAL, and the next tick (or the
		// writer) copies them.
		pages, err := checkpoint(context.Background(), c.db)
		if err != nil || pages >= walResetPages {
			c.w.wantCheckpoint.Store(true)
		}
	}
}

// checkpoint runs a PASSIVE checkpoint on db and returns the pages in the WAL.
func checkpoint(ctx context.Context, db *sql.DB) (pages int, err error) {
	var busy, done int
	err = db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &pages, &done)
	return pages, err
}
