package sqlpool

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// server stands in for a database server's connection limit: it accepts up to limit connections
// open at once and refuses the others. Real servers' pools are tested by the stores and the
// transport (persistence/postgres, persistence/mysql, transport/sqltransport).
type server struct {
	mu          sync.Mutex
	limit, open int
	opened      int // in all
}

var errTooMany = errors.New("too many connections")

func (s *server) Connect(context.Context) (driver.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= s.limit {
		return nil, errTooMany
	}
	s.open++
	s.opened++
	return &conn{s: s}, nil
}

func (s *server) Driver() driver.Driver { return nil }

type conn struct{ s *server }

func (c *conn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not used") }
func (c *conn) Begin() (driver.Tx, error)           { return nil, errors.New("not used") }
func (c *conn) Close() error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.open--
	return nil
}

func pool(t *testing.T, s *server, max int) *sql.DB {
	db := sql.OpenDB(s)
	db.SetMaxOpenConns(max)
	db.SetMaxIdleConns(max)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

func TestWarmOpensThePoolWhole(t *testing.T) {
	s := &server{limit: 100}
	db := pool(t, s, 6)
	require.NoError(t, Warm(t.Context(), db, 6))
	stats := db.Stats()
	require.Equal(t, 6, stats.OpenConnections, "every connection the pool may keep is open")
	require.Equal(t, 6, stats.Idle, "and idle, for the next calls")

	// The next calls find them: no connection is opened for them.
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := db.Conn(t.Context())
			require.NoError(t, err)
			require.NoError(t, c.Close())
		}()
	}
	wg.Wait()
	require.Equal(t, 6, s.opened, "calls after Warm reuse its connections")
}

func TestWarmTakesWhatTheServerAllows(t *testing.T) {
	s := &server{limit: 2}
	db := pool(t, s, 5)
	require.NoError(t, Warm(t.Context(), db, 5), "a server refusing connections beyond the first is not an error")
	require.Equal(t, 2, db.Stats().OpenConnections)
}

func TestWarmFailsWhenTheServerRefusesAll(t *testing.T) {
	db := pool(t, &server{limit: 0}, 5)
	require.ErrorIs(t, Warm(t.Context(), db, 5), errTooMany)
	require.Zero(t, db.Stats().OpenConnections)
}
