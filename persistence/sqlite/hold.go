package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/timeoutmill/timeoutmill/persistence"
)

var (
	_ persistence.Parker  = (*Store)(nil)
	_ persistence.Claimer = (*Store)(nil)
)

// hold takes instance with an exclusive lock (flock) on a file beside the database,
// "<database>-instance-<hash>.lock", the hash naming the table and the instance: every process
// on this machine that opens the file sees it, and the operating system releases it when the
// process ends, however it ends. The lock file is left in place. A database that is not a file
// (in memory) is held in this store only.
func (s *Store) hold(ctx context.Context, instance string) (func() error, bool, error) {
	var path string
	rows, err := s.reader.QueryContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`)
	if err != nil {
		return nil, false, err
	}
	for rows.Next() {
		if err := rows.Scan(&path); err != nil {
			return nil, false, errors.Join(err, rows.Close())
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, false, err
	}
	sum := sha256.Sum256([]byte(s.table + "\x00" + instance))
	key := hex.EncodeToString(sum[:12])
	if path == "" {
		return s.memoryHolds.hold(key)
	}
	lockPath := path + "-instance-" + key + ".lock"
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open the lock file: %w", err)
	}
	held, err := lockFile(f)
	if err != nil || !held {
		return nil, false, errors.Join(err, f.Close())
	}
	// Closing the file releases the lock.
	return f.Close, true, nil
}

// processHolds are the names held in this store when the database is not a file.
type processHolds struct {
	mu   sync.Mutex
	held map[string]bool
}

func (h *processHolds) hold(key string) (func() error, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[key] {
		return nil, false, nil
	}
	if h.held == nil {
		h.held = make(map[string]bool)
	}
	h.held[key] = true
	return func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.held, key)
		return nil
	}, true, nil
}
