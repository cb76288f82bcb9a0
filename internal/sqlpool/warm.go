// Package sqlpool prepares the database/sql pools the SQL stores and the SQL transport open.
package sqlpool

import (
	"context"
	"database/sql"
	"sync"
)

// Warm opens n connections of db side by side and gives them back to the pool, which keeps them
// idle for the next calls: a pool that opens connections only when a burst of work asks for them
// holds that work up while the server starts each one, which takes tens of milliseconds on a busy
// server and more under load. db must keep at least n idle connections (SetMaxIdleConns).
//
// The first connection must answer: its error is returned unwrapped, the server cannot be reached. The
// others are opened as far as the server allows (it may refuse them, at its max_connections,
// say); the pool opens those it misses when they are needed, as it would have without Warm.
func Warm(ctx context.Context, db *sql.DB, n int) error {
	first, err := db.Conn(ctx)
	if err == nil {
		err = first.PingContext(ctx)
	}
	if err != nil {
		if first != nil {
			_ = first.Close()
		}
		return err
	}
	conns := []*sql.Conn{first}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for range n - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := db.Conn(ctx)
			if err != nil {
				return
			}
			if err := c.PingContext(ctx); err != nil {
				_ = c.Close()
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, c := range conns {
		_ = c.Close() // back to the pool, idle
	}
	return nil
}
