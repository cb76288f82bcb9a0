package sqlite

import (
	"context"
	"database/sql"
	"os"
	"time"
)

const (
	// checkpointEvery is how often the checkpointer copies the WAL into the database file.
	checkpointEvery = 100 * time.Millisecond
	// walResetPages is the size of the WAL, in pages, from which the writer finishes the
	// checkpoint itself, so that its next transaction starts the WAL over: under a steady stream
	// of commits, a checkpoint on another connection never catches up with the last one. Each
	// time holds up the changes for the pages committed since the checkpointer's last copy; the
	// larger the WAL may grow, the rarer that is. It matches walLimitBytes with 4 KiB pages.
	walResetPages = 16384
	// walLimitBytes is what SQLite truncates the WAL file to once it starts over
	// (journal_size_limit): a burst's WAL does not keep its disk space.
	walLimitBytes = 64 << 20
)

// checkpointer copies the WAL into the database file from a goroutine and a connection of its
// own. Open turns SQLite's automatic checkpoint off on the writer's connection, where it would
// run inside whichever Store or ClaimDue committed the page that crossed its threshold and make
// that call wait for the copy and its fsyncs. A PASSIVE checkpoint takes no lock that the
// writer or the readers wait for.
//
// SQLite syncs the database file only at the end of a checkpoint that copied the whole WAL,
// which under a steady stream of commits only the writer's does. The checkpointer syncs the
// file itself after each copy, through file, so that the writer's sync does not have to write
// out every page copied since the last one.
type checkpointer struct {
	db      *sql.DB
	w       *writer
	file    *os.File
	closing chan struct{}
	stopped chan struct{}
}

// newCheckpointer starts a checkpointer on the database file at path. file must stay open until
// SQLite's last connection to it in this process is closed: closing a file descriptor drops
// every POSIX lock the process holds on the file, SQLite's included (closeFile).
func newCheckpointer(db *sql.DB, w *writer, path string) (*checkpointer, error) {
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	c := &checkpointer{db: db, w: w, file: file, closing: make(chan struct{}), stopped: make(chan struct{})}
	go c.loop()
	return c, nil
}

// close stops the checkpointer once its checkpoint is done. SQLite checkpoints the WAL when the
// last connection to the file closes.
func (c *checkpointer) close() {
	close(c.closing)
	<-c.stopped
}

// closeFile closes the file the checkpointer syncs, once SQLite's connections are closed.
func (c *checkpointer) closeFile() error {
	return c.file.Close()
}

func (c *checkpointer) loop() {
	defer close(c.stopped)
	tick := time.NewTicker(checkpointEvery)
	defer tick.Stop()
	last := 0 // the WAL's pages at the last checkpoint
	for {
		select {
		case <-c.closing:
			return
		case <-tick.C:
		}
		// A failed checkpoint loses nothing: the pages stay in the WAL, and the next tick (or the
		// writer) copies them.
		pages, err := checkpoint(context.Background(), c.db)
		if err == nil && pages != last {
			// So is a failed sync: SQLite syncs the file before the WAL starts over.
			_ = c.file.Sync()
		}
		last = pages
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
