package acceptance

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// txDatabase opens the application's own *sql.DB and a store on it, as a program that schedules
// timeouts in its transactions does.
type txDatabase struct {
	name string
	open func(t *testing.T, endpoint string) (*sql.DB, persistence.Store)
}

func txDatabases() []txDatabase {
	closeAll := func(t *testing.T, db *sql.DB, store persistence.Store) {
		t.Cleanup(func() {
			require.NoError(t, store.Close())
			require.NoError(t, db.Close())
		})
	}
	return []txDatabase{
		{"postgres", func(t *testing.T, endpoint string) (*sql.DB, persistence.Store) {
			dsn, schema := testenv.PostgresSchema(t)
			db, err := sql.Open("pgx", dsn)
			require.NoError(t, err)
			store, err := postgres.New(db, postgres.Config{Schema: schema, Endpoint: endpoint})
			require.NoError(t, err)
			closeAll(t, db, store)
			return db, store
		}},
		{"mariadb", func(t *testing.T, endpoint string) (*sql.DB, persistence.Store) {
			dsn, _ := testenv.MySQLDatabase(t)
			db, err := sql.Open("mysql", dsn)
			require.NoError(t, err)
			store, err := mysql.New(db, mysql.Config{Endpoint: endpoint})
			require.NoError(t, err)
			closeAll(t, db, store)
			return db, store
		}},
		{"sqlite", func(t *testing.T, endpoint string) (*sql.DB, persistence.Store) {
			// As persistence/sqlite documents for ScheduleTx: the write lock at BEGIN, and a busy
			// timeout for the store's writer.
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+
				"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
			require.NoError(t, err)
			store, err := sqlite.New(context.Background(), db, sqlite.Config{Endpoint: endpoint})
			require.NoError(t, err)
			closeAll(t, db, store)
			return db, store
		}},
	}
}

// TestScheduleTxCommitOrRollBack: 1,000 orders, each inserted with its payment timeout in one
// transaction of the application's, every other one rolled back: the timeouts of the committed
// orders all arrive, once, never early; those of the rolled-back ones never exist.
func TestScheduleTxCommitOrRollBack(t *testing.T) {
	for _, d := range txDatabases() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "sched-tx")
			db, store := d.open(t, e.endpoint)
			n := startNode(t, e, "node", store, nil)
			dest := e.queue("payment-timeouts")
			arrivals := receive(t, e, dest)
			ctx := t.Context()
			_, err := db.ExecContext(ctx, `CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)`)
			require.NoError(t, err)
			<-n.manager.Ready() // ScheduleTx needs the store's table

			due := time.Now().Add(4 * time.Second)
			want := map[string]*scheduled{}
			var rolledBack []string
			for i := range 1000 {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				order := fmt.Sprintf("order-%d", i)
				_, err = tx.ExecContext(ctx, rebind(d.name, `INSERT INTO orders (id) VALUES (?)`), order)
				require.NoError(t, err)
				msg := newDelayed(order+" not paid", due)
				res, err := n.manager.ScheduleTx(ctx, tx, dest, msg)
				require.NoError(t, err)
				require.Equal(t, persistence.Created, res.Outcome)
				if i%2 == 0 {
					require.NoError(t, tx.Commit())
					want[msg.UUID] = &scheduled{msg: msg, due: due}
				} else {
					require.NoError(t, tx.Rollback())
					want[msg.UUID] = &scheduled{msg: msg, due: due, gone: true}
					rolledBack = append(rolledBack, msg.UUID)
				}
			}
			var orders int
			require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&orders))
			require.Equal(t, 500, orders)
			for _, id := range rolledBack {
				_, err := n.manager.Get(ctx, id)
				require.ErrorIs(t, err, persistence.ErrNotFound, "the timeout of a rolled-back transaction")
			}
			tallySchedule(t, "ScheduleTx on "+d.name, arrivals, want)
		})
	}
}

// rebind writes a statement's ? placeholders as the database wants them.
func rebind(database, query string) string {
	if database != "postgres" {
		return query
	}
	out, n := []byte{}, 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			out = append(out, fmt.Sprintf("$%d", n)...)
			continue
		}
		out = append(out, query[i])
	}
	return string(out)
}
