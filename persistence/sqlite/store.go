package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"

	// The pure Go SQLite driver, registered as "sqlite".
	_ "modernc.org/sqlite"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// Store keeps timeouts in one SQLite table. It is safe for concurrent use, and several processes
// may share the file: every claim is one atomic statement.
type Store struct {
	*core // the shared SQL core: Store, ClaimDue, the batch, inspection and handover calls
	openMark
	// writer makes every change to the table, from one goroutine that commits changes made at
	// the same time together. Open gives its pool one connection, so that no two goroutines of
	// this process ever wait for each other in SQLite's busy handler.
	writer *writer
	// checkpointer copies the WAL into the database file (Open's stores only).
	checkpointer *checkpointer
	// reader runs the statements that only read; in WAL mode they never wait for the writer.
	reader *sql.DB
	// pools are closed by Close: Open's two, none for New (the caller's *sql.DB stays open).
	pools []*sql.DB
	table string
	q     queries
	// prep holds the statements prepared on the pools, which the writer and reader run.
	prep *prepared
	// memoryHolds are the instance names held when the database is not a file.
	memoryHolds processHolds
}

type core = sqlstore.Store // embedded by this name: no exported field, no hidden Store method

// maxIn bounds the ids of one IN list, far below SQLite's limit on bound parameters; a power of
// two (see sqlstore.InSize).
const maxIn = 512

// binding is how the store sends and reads values: ? in order, times as microseconds since the
// epoch (INTEGER), id lists padded to a few sizes, whose statements are prepared (see prepare).
func binding() sqlstore.Binding {
	return sqlstore.Binding{Style: sqlstore.Positional, Times: sqlstore.TimeUnixMicro, PadIn: true, MaxIn: maxIn}
}

// newStore returns a store whose changes w makes and whose reads reader runs.
func newStore(w *writer, reader *sql.DB, pools []*sql.DB, table string) (*Store, error) {
	s := &Store{openMark: opened(), writer: w, reader: reader, pools: pools, table: table, q: newQueries(table), prep: w.prep}
	var err error
	s.core, err = sqlstore.New(sqlstore.Dialect{
		Name: "sqlite",
		DB:   reader,
		Run: sqlstore.Run{
			Reader: querier{p: s.prep, db: reader},
			// One writer for the file: changes made at the same time commit together, and no two
			// goroutines of this process wait for each other in SQLite's busy handler.
			Write: func(ctx context.Context, tx bool, run func(ctx context.Context, q sqlstore.Querier) error) error {
				if tx {
					run = inOneTransaction(run)
				}
				return w.do(ctx, run)
			},
			BatchTx: true,
		},
		SQL:   s.q.core,
		Bind:  binding(),
		Locks: sqlstore.Locks{Hold: s.hold},
		Close: func() error {
			if s.checkpointer != nil {
				s.checkpointer.close()
			}
			w.close()
			err := s.prep.close()
			for _, db := range pools {
				err = errors.Join(err, db.Close())
			}
			if s.checkpointer != nil {
				err = errors.Join(err, s.checkpointer.closeFile())
			}
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// c is the store's core: for a store that Open or New did not make, one whose calls all fail.
func (s *Store) c() *sqlstore.Store {
	if s == nil || s.core == nil {
		return sqlstore.NotOpened("sqlite")
	}
	return s.core
}

// Open opens (creating when missing) the database file at config.Path in WAL mode, creates the
// table and its indexes when missing, and returns a store on it. Close closes the file. With
// config.MustExist it creates neither. Its errors name the file.
func Open(ctx context.Context, config Config) (*Store, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if config.Path == "" {
		return nil, errors.New("sqlite: invalid config: Path must be set for Open")
	}
	if config.Path == ":memory:" || strings.HasPrefix(config.Path, "file::memory:") {
		return nil, errors.New("sqlite: invalid config: Path must be a file; use persistence/memory for a store in memory")
	}
	if err := checkPath(ctx, config); err != nil {
		return nil, err
	}

	writer, err := sql.Open("sqlite", dsn(config, false))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)

	reader, err := sql.Open("sqlite", dsn(config, true))
	if err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	reader.SetMaxOpenConns(readers)
	reader.SetMaxIdleConns(readers)

	checkpoints, err := sql.Open("sqlite", dsn(config, false))
	if err != nil {
		_ = writer.Close()
		_ = reader.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	checkpoints.SetMaxOpenConns(1)
	checkpoints.SetMaxIdleConns(1)
	checkpoints.SetConnMaxLifetime(0)
	checkpoints.SetConnMaxIdleTime(0)

	w := newWriter(writer)
	s, err := newStore(w, reader, []*sql.DB{reader, writer, checkpoints}, config.Table)
	if err != nil {
		w.close()
		return nil, errors.Join(err, writer.Close(), reader.Close(), checkpoints.Close())
	}
	if err := s.setUp(ctx, config.MustExist); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	if err := s.prepare(ctx, writer, reader); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	if s.checkpointer, err = newCheckpointer(checkpoints, w, config.Path); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", config.Path, err)
	}
	return s, nil
}

// New returns a store on a *sql.DB the caller opened with the "sqlite" driver, and creates the
// table and its indexes when missing (unless config.MustExist). The caller's pragmas apply: use
// WAL mode and a busy timeout, or limit db to one connection. Close leaves db open.
func New(ctx context.Context, db *sql.DB, config Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlite: db is nil")
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	w := newWriter(db)
	s, err := newStore(w, db, nil, config.Table)
	if err != nil {
		w.close()
		return nil, err
	}
	if err := s.setUp(ctx, config.MustExist); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := s.prepare(ctx, db, db); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return s, nil
}

// dsn builds the data source name of a pool on the file. The path is escaped as an SQLite URI
// path, so that '?', '#' and '%' in it mean themselves.
func dsn(config Config, readOnly bool) string {
	params := url.Values{}
	params.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", config.BusyTimeout.Milliseconds()))
	params.Add("_pragma", "journal_mode(WAL)")
	params.Add("_pragma", "synchronous("+strings.ToUpper(config.Synchronous)+")")
	if readOnly {
		params.Add("_pragma", "query_only(1)")
	} else {
		// The checkpointer copies the WAL into the file, not the commit that crosses SQLite's
		// threshold; a WAL that starts over is truncated to walLimitBytes.
		params.Add("_pragma", "wal_autocheckpoint(0)")
		params.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walLimitBytes))
		// A group's transaction takes the write lock at BEGIN, so that it never has to upgrade a
		// read snapshot another process's commit made stale (SQLITE_BUSY_SNAPSHOT).
		params.Add("_txlock", "immediate")
	}
	if config.MustExist {
		params.Add("mode", "rw") // SQLite's own URI parameter: a file deleted meanwhile is not made again
	}
	return fileURI(config.Path) + "?" + params.Encode()
}

// fileURI is the SQLite URI of the file at path, which is escaped so that '?', '#' and '%' in
// it mean themselves.
func fileURI(path string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
}

// prepare prepares the statements a backlog runs for each of its timeouts: on writer, the claim,
// the insert and the removal; on reader, the lookups.
func (s *Store) prepare(ctx context.Context, writer, reader *sql.DB) error {
	c, st := s.q.core, sqlstore.StatementsOf(s.core)
	writes := []string{st.Claim.SQL, st.Store.SQL, st.Delete.SQL}
	reads := []string{st.Next.SQL, st.Peek.SQL}
	for _, n := range sqlstore.InSizes(maxIn) {
		writes = append(writes, c.RemoveIn(n))
		reads = append(reads, c.PeekIn(n))
	}
	if err := s.prep.prepare(ctx, writer, writes...); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := s.prep.prepare(ctx, reader, reads...); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}

// SetupInfrastructure creates the table and its indexes when they are missing, and adds the key
// column and its index, the parking reason and the claiming instance to a table an older version
// created, in one transaction.
func (s *Store) SetupInfrastructure(ctx context.Context) error {
	if err := sqlstore.Opened(s.c()); err != nil {
		return err
	}
	if err := s.createTable(ctx); err != nil {
		return fmt.Errorf("sqlite: set up table: %w", err)
	}
	return nil
}

// createTable creates the table and its indexes when they are missing, and adds the key column
// and its index to a table an older version created, in one transaction.
func (s *Store) createTable(ctx context.Context) error {
	return s.writer.do(ctx, inOneTransaction(func(ctx context.Context, db execer) error {
		for _, stmt := range s.q.setup {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		rows, err := db.QueryContext(ctx, s.q.hasKey, s.table)
		if err != nil {
			return err
		}
		var columns int
		for rows.Next() {
			if err := rows.Scan(&columns); err != nil {
				return errors.Join(err, rows.Close())
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		if columns == 0 {
			if _, err := db.ExecContext(ctx, s.q.addKey); err != nil {
				return err
			}
		}
		if _, err = db.ExecContext(ctx, s.q.keyIndex); err != nil {
			return err
		}
		parked, err := count(ctx, db, s.q.hasParked, s.table)
		if err != nil {
			return err
		}
		if parked != 2 {
			// An older table has neither column (both are added in one transaction).
			for _, stmt := range s.q.addParked {
				if _, err := db.ExecContext(ctx, stmt); err != nil {
					return err
				}
			}
		}
		_, err = db.ExecContext(ctx, s.q.claimedByIndex)
		return err
	}))
}

// count runs a query of one number.
func count(ctx context.Context, db execer, query string, args ...any) (int, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	var n int
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, errors.Join(err, rows.Close())
		}
	}
	return n, errors.Join(rows.Err(), rows.Close())
}
