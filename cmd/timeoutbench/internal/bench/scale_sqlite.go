package bench

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// SQLite scale scenario settings.
const (
	// sqliteScalePending timeouts fill the full SQLite store: the embedded store's size, whatever
	// PostgreSQL's row holds.
	sqliteScalePending = 1000000
	// sqliteFillBatch timeouts go in each transaction of the fill.
	sqliteFillBatch = 50000
	// The batch store rate is measured with sqliteBatchWriters goroutines each storing
	// sqliteBatchSize timeouts a call, as the service's satellites store the messages of a batch;
	// the single store rate with sqliteSingleWriters goroutines each calling Store.
	sqliteBatchWriters  = 4
	sqliteBatchSize     = 100
	sqliteSingleWriters = 16
	// sqliteClaimPasses times the claims of the due timeouts this many times: after each pass the
	// claimed ids are released. 18 claims are timed in a pass, so 20 passes give 360, of which
	// the p99 is the fourth slowest, not the slowest of all.
	sqliteClaimPasses = 20
	// List (a first page, a page after a cursor) is timed steeringCalls times, or as many as
	// sqliteListBudget allows but at least sqliteListCalls: a table without the due index (an
	// older version's) sorts all of its rows for each page, about a minute at 1 M pending.
	sqliteListCalls  = 3
	sqliteListBudget = 30 * time.Second
)

// runScaleSQLite measures the SQLite store through its public API with an empty store and with
// sqliteScalePending timeouts pending, in the shape of the PostgreSQL rows: the batch and single
// store rates, one claim's time (p50, p99, max), an idle poll, the steering calls, and the bytes
// the process writes per stored timeout. The two stores (two files) are measured in turns.
func runScaleSQLite(ctx context.Context, env Env, plan Plan) ([]Result, error) {
	var sides []*sqliteScale
	defer func() {
		for _, s := range sides {
			if err := s.close(); err != nil {
				env.logger().Error("Cleaning up after the SQLite scale scenario failed", err, nil)
			}
		}
	}()
	for range 2 {
		s, err := newSQLiteScale(ctx, env)
		if err != nil {
			return nil, err
		}
		sides = append(sides, s)
	}
	empty, full := sides[0], sides[1]

	progress(env, "      filling a SQLite store with %s timeouts", count(sqliteScalePending))
	start := time.Now()
	if err := full.fill(ctx, sqliteScalePending, scaleDueRows); err != nil {
		return nil, err
	}
	filled := time.Since(start)
	if err := empty.fill(ctx, scaleDueRows, scaleDueRows); err != nil {
		return nil, err
	}
	claims, polls, err := sqliteClaims(ctx, sides)
	if err != nil {
		return nil, err
	}
	// The empty store is emptied of its due ids, then given as many timeouts to steer as it
	// needs, not due for a day.
	if err := empty.empty(ctx); err != nil {
		return nil, err
	}
	if err := empty.fill(ctx, len(steeringOps)*steeringCalls, 0); err != nil {
		return nil, err
	}
	steering, err := sqliteSteering(ctx, sides)
	if err != nil {
		return nil, err
	}
	if err := empty.empty(ctx); err != nil {
		return nil, err
	}

	stores := max(plan.ScaleStores, 5*sqliteBatchWriters*sqliteBatchSize)
	per := stores / scaleRounds
	batch := make([][]float64, len(sides))
	single := make([][]float64, len(sides))
	written := make([]int64, len(sides))
	read := make([]int64, len(sides))
	for round := range scaleRounds {
		for turn := range sides {
			i := (turn + round) % len(sides)
			r, rw, err := sides[i].storeRate(ctx, per, sqliteBatchWriters, sqliteBatchSize, watermill.NewUUID)
			if err != nil {
				return nil, err
			}
			batch[i] = append(batch[i], r)
			read[i] += rw.read
			written[i] += rw.written
			r, _, err = sides[i].storeRate(ctx, per/4, sqliteSingleWriters, 1, watermill.NewUUID)
			if err != nil {
				return nil, err
			}
			single[i] = append(single[i], r)
		}
	}
	// Then batch rounds with time-ordered ids (watermill.NewULID), which land beside each other
	// in the id index: what the docs recommend to senders of a large embedded store.
	ordered := make([][]float64, len(sides))
	orderedWritten := make([]int64, len(sides))
	for round := range scaleOrderedRounds {
		for turn := range sides {
			i := (turn + round) % len(sides)
			r, rw, err := sides[i].storeRate(ctx, per, sqliteBatchWriters, sqliteBatchSize, watermill.NewULID)
			if err != nil {
				return nil, err
			}
			ordered[i] = append(ordered[i], r)
			orderedWritten[i] += rw.written
		}
	}
	var results []Result
	for i, s := range sides {
		pending := 0
		if s == full {
			pending = sqliteScalePending
		}
		perTimeout := ioBytes{read: read[i] / int64(per*scaleRounds), written: written[i] / int64(per*scaleRounds)}
		r := sqliteScaleResult(pending, per, claims[i], polls[i], batch[i], single[i], steering[i], perTimeout)
		slices.Sort(ordered[i])
		o := ordered[i][len(ordered[i])/2]
		r.Figures["store_ordered"] = o
		r.Notes = append(r.Notes, fmt.Sprintf("batch store rate with time-ordered ids (watermill.NewULID): %s/s, median of %d rounds (%s–%s/s), %s written per stored timeout",
			rate(o), len(ordered[i]), rate(ordered[i][0]), rate(ordered[i][len(ordered[i])-1]), kib(float64(orderedWritten[i])/float64(per*scaleOrderedRounds))))
		results = append(results, r)
	}
	results[1].Notes = append(results[1].Notes,
		fmt.Sprintf("filled by SQL in %s: random UUIDs, %d-byte payloads, 1 in %d due, scattered",
			filled.Round(time.Second), scalePayloadBytes, max(1, sqliteScalePending/scaleDueRows)))
	return results, nil
}

// sqliteScaleResult is the row of one SQLite store.
func sqliteScaleResult(pending, per int, claims, polls []time.Duration, batch, single []float64, steering map[string]steered, perTimeout ioBytes) Result {
	slices.Sort(claims)
	slices.Sort(polls)
	slices.Sort(batch)
	slices.Sort(single)
	p99 := claims[max(0, (len(claims)*99+99)/100-1)]
	r := Result{
		System: fmt.Sprintf("SQLite store, %s pending", count(pending)), Kind: KindScale,
		Messages: per * scaleRounds, PublishRate: batch[len(batch)/2],
		Figures: map[string]float64{
			"pending":               float64(pending),
			"store":                 batch[len(batch)/2],
			"store_single":          single[len(single)/2],
			"claim_p50_ms":          float64(claims[len(claims)/2]) / float64(time.Millisecond),
			"claim_p99_ms":          float64(p99) / float64(time.Millisecond),
			"claim_max_ms":          float64(claims[len(claims)-1]) / float64(time.Millisecond),
			"poll_p50_ms":           float64(polls[len(polls)/2]) / float64(time.Millisecond),
			"written_per_timeout_b": float64(perTimeout.written),
			"read_per_timeout_b":    float64(perTimeout.read),
		},
	}
	r.Notes = append(r.Notes,
		fmt.Sprintf("publish/s = the batch store rate: median of %d rounds of %d timeouts, %d goroutines each calling StoreMany with %d (%s–%s/s)",
			len(batch), per, sqliteBatchWriters, sqliteBatchSize, rate(batch[0]), rate(batch[len(batch)-1])),
		fmt.Sprintf("single store rate: median of %d rounds of %d timeouts, %d goroutines each calling Store: %s/s (%s–%s/s)",
			len(single), per/4, sqliteSingleWriters, rate(single[len(single)/2]), rate(single[0]), rate(single[len(single)-1])),
		fmt.Sprintf("one claim of %d due ids: p50 %s ms, p99 %s ms, max %s ms (%d claims in %d passes, after %d to warm up in each)",
			scaleClaimBatch, millis(claims[len(claims)/2]), millis(p99), millis(claims[len(claims)-1]), len(claims), sqliteClaimPasses, scaleWarmUp),
		fmt.Sprintf("poll with nothing due (claim + next): p50 %s ms", millis(polls[len(polls)/2])),
		fmt.Sprintf("%s written and %s read per stored timeout of the batch rounds (the process's write() and read() bytes, /proc/self/io wchar and rchar: WAL, checkpoints and pages read back from the file)",
			kib(float64(perTimeout.written)), kib(float64(perTimeout.read))))
	steer := "steering p50 in ms (calls timed):"
	for _, op := range steeringOps {
		r.Figures[op.name+"_p50_ms"] = float64(steering[op.name].p50) / float64(time.Millisecond)
		steer += fmt.Sprintf(" %s %s (%d)", op.name, millis(steering[op.name].p50), steering[op.name].calls)
	}
	r.Notes = append(r.Notes, steer)
	return r
}

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }

// sqliteScale is one store of the SQLite scenario, in its own file.
type sqliteScale struct {
	path  string
	store *sqlite.Store
	// db is a pool of the bench's own on the file, which fills it (with a page cache that holds
	// the indexes, or the fill would take minutes); table is the store's table.
	db    *sql.DB
	table string
	// later are ids of timeouts the fill made due in more than a day, for the steering calls;
	// middle is the position of one due in about 15 days.
	later  []string
	middle persistence.Position
	// claimed are the ids claimed and not yet removed.
	claimed []string
}

func newSQLiteScale(ctx context.Context, env Env) (*sqliteScale, error) {
	endpoint := endpointName()
	s := &sqliteScale{path: filepath.Join(env.TempDir, endpoint+"-scale.db")}
	var err error
	if s.store, err = sqlite.Open(ctx, sqlite.Config{Path: s.path, Endpoint: endpoint}); err != nil {
		return nil, fmt.Errorf("opening the SQLite store: %w", err)
	}
	s.table = quote(endpoint + ".timeouts")
	if s.db, err = sql.Open("sqlite", "file:"+s.path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=cache_size(-262144)"); err != nil {
		return nil, errors.Join(err, s.store.Close())
	}
	s.db.SetMaxOpenConns(1)
	return s, nil
}

func (s *sqliteScale) close() error {
	err := errors.Join(s.db.Close(), s.store.Close())
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if rmErr := os.Remove(s.path + suffix); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			err = errors.Join(err, rmErr)
		}
	}
	return err
}

// fill inserts n timeouts by SQL, sqliteFillBatch a transaction, as a store that has been in use
// holds them: random UUIDs (version 4, as watermill.NewUUID makes them), payloads of
// scalePayloadBytes, due ones (1 in n/due, when due > 0) due within the past hour and the others
// at random over the 30 days after the next, so that the due rows lie scattered through the table
// and its indexes. It then picks the timeouts to steer and the page to list.
func (s *sqliteScale) fill(ctx context.Context, n, due int) error {
	every := n + 1
	if due > 0 {
		every = max(1, n/due)
	}
	md := persistence.EncodeMetadata(map[string]string{"timeoutbench": "fill"})
	now := time.Now()
	for first := 1; first <= n; first += sqliteFillBatch {
		last := min(n, first+sqliteFillBatch-1)
		_, err := s.db.ExecContext(ctx, `WITH RECURSIVE g(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM g WHERE i < ?2),
rows AS MATERIALIZED (SELECT i, CASE WHEN i % ?3 = 0 THEN ?4 - 3600000000 + abs(random()) % 3540000000
	ELSE ?4 + 86400000000 + abs(random()) % 2592000000000 END AS d FROM g)
INSERT INTO `+s.table+` (id, destination, due, available_at, owner, payload, metadata, failure_count)
SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-'
	|| substr('89AB', 1 + abs(random()) % 4, 1) || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))),
	'timeoutbench_nowhere', d, d, '', randomblob(?5), ?6, 0
FROM rows`, first, last, every, now.UnixMicro(), scalePayloadBytes, md)
		if err != nil {
			return fmt.Errorf("filling the store: %w", err)
		}
	}
	// The timeouts to steer, each not due for a day, and a page from the middle of the table: the
	// cursor of the timeout due in 15 days.
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM `+s.table+` WHERE due > ? LIMIT ?`,
		now.Add(24*time.Hour).UnixMicro(), len(steeringOps)*steeringCalls)
	if err != nil {
		return fmt.Errorf("picking ids: %w", err)
	}
	s.later = s.later[:0]
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return errors.Join(err, rows.Close())
		}
		s.later = append(s.later, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("picking ids: %w", err)
	}
	var us int64
	// Any timeout due in that hour will do.
	middle := now.Add(15 * 24 * time.Hour)
	if err := s.db.QueryRowContext(ctx, `SELECT due, id FROM `+s.table+` WHERE due BETWEEN ? AND ? LIMIT 1`,
		middle.UnixMicro(), middle.Add(time.Hour).UnixMicro()).Scan(&us, &s.middle.ID); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("picking a page: %w", err)
	}
	s.middle.Due = time.UnixMicro(us).UTC()
	return nil
}

// empty removes the timeouts the claims took and those fill made to steer.
func (s *sqliteScale) empty(ctx context.Context) error {
	ids := append(s.claimed, s.later...)
	for len(ids) > 0 {
		n := min(len(ids), 500)
		if _, err := s.store.RemoveMany(ctx, ids[:n]); err != nil {
			return fmt.Errorf("emptying the store: %w", err)
		}
		ids = ids[n:]
	}
	s.claimed, s.later, s.middle = nil, nil, persistence.Position{}
	return nil
}

// storeRate stores n timeouts due in 90 days, with ids from newID, from writers goroutines, each
// storing size a call (StoreMany, or Store when size is 1), and returns how many a second were stored and the bytes
// the process read and wrote meanwhile.
func (s *sqliteScale) storeRate(ctx context.Context, n, writers, size int, newID func() string) (float64, ioBytes, error) {
	due := time.Now().Add(90 * 24 * time.Hour)
	md := map[string]string{"timeoutbench": "store"}
	batches := make(chan []persistence.Timeout, n/size+1)
	for i := 0; i < n; i += size {
		ts := make([]persistence.Timeout, min(size, n-i))
		for j := range ts {
			ts[j] = persistence.Timeout{ID: newID(), Destination: "timeoutbench_nowhere", Due: due, Payload: scalePayload(), Metadata: md}
		}
		batches <- ts
	}
	close(batches)
	before, err := readIO()
	if err != nil {
		return 0, ioBytes{}, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for ts := range batches {
				var err error
				if len(ts) == 1 {
					_, err = s.store.Store(ctx, ts[0])
				} else {
					_, err = s.store.StoreMany(ctx, ts)
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, ioBytes{}, fmt.Errorf("storing: %w", err)
	}
	after, err := readIO()
	return float64(n) / elapsed.Seconds(), ioBytes{read: after.read - before.read, written: after.written - before.written}, err
}

// sqliteClaims claims due ids from each side in turn, timing each claim after scaleWarmUp untimed
// ones, until none is due; then releases them and does it again, sqliteClaimPasses times in all.
// Then it times scaleClaims polls on each that find nothing due (ClaimDue and Next, as the poller
// does). The ids claimed in the last pass stay leased for an hour.
func sqliteClaims(ctx context.Context, sides []*sqliteScale) (claims, polls [][]time.Duration, err error) {
	claims = make([][]time.Duration, len(sides))
	for pass := range sqliteClaimPasses {
		done := make([]bool, len(sides))
		for round := 0; ; round++ {
			active := false
			for i, s := range sides {
				if done[i] {
					continue
				}
				start := time.Now()
				ids, err := s.store.ClaimDue(ctx, start, scaleClaimBatch, time.Hour)
				d := time.Since(start)
				if err != nil {
					return nil, nil, fmt.Errorf("claiming: %w", err)
				}
				if len(ids) == 0 {
					done[i] = true
					continue
				}
				active = true
				s.claimed = append(s.claimed, ids...)
				if round >= scaleWarmUp {
					claims[i] = append(claims[i], d)
				}
			}
			if !active {
				break
			}
		}
		if pass == sqliteClaimPasses-1 {
			break
		}
		for _, s := range sides {
			for ids := s.claimed; len(ids) > 0; {
				n := min(len(ids), 500)
				if _, err := s.store.Release(ctx, ids[:n]); err != nil {
					return nil, nil, fmt.Errorf("releasing: %w", err)
				}
				ids = ids[n:]
			}
			s.claimed = nil
		}
	}
	stores := make([]persistence.Store, len(sides))
	for i, s := range sides {
		stores[i] = s.store
	}
	if polls, err = timeIdlePolls(ctx, stores, claims); err != nil {
		return nil, nil, err
	}
	return claims, polls, nil
}

// sqliteSteering times the steering calls of steeringOps, steeringCalls times each on each side
// in turns, on timeouts not due for a day (each call its own, so Cancel finds one), and returns
// each side's p50 per call. List is timed fewer times when its calls take long (sqliteListBudget).
func sqliteSteering(ctx context.Context, sides []*sqliteScale) ([]map[string]steered, error) {
	ops := map[string]func(ctx context.Context, s *sqliteScale, id string) error{
		"get": func(ctx context.Context, s *sqliteScale, id string) error {
			_, err := s.store.Peek(ctx, id)
			return err
		},
		"list": func(ctx context.Context, s *sqliteScale, _ string) error {
			_, err := s.store.List(ctx, persistence.ListOptions{})
			return err
		},
		"list_after": func(ctx context.Context, s *sqliteScale, _ string) error {
			_, err := s.store.List(ctx, persistence.ListOptions{After: s.middle})
			return err
		},
		"list_key": func(ctx context.Context, s *sqliteScale, id string) error {
			_, err := s.store.List(ctx, persistence.ListOptions{Key: "key-" + id})
			return err
		},
		"reschedule": func(ctx context.Context, s *sqliteScale, id string) error {
			now := time.Now()
			ok, err := s.store.Reschedule(ctx, id, now.Add(60*24*time.Hour), now)
			if err == nil && !ok {
				err = fmt.Errorf("timeout %s was not pending", id)
			}
			return err
		},
		"cancel": func(ctx context.Context, s *sqliteScale, id string) error {
			ok, err := s.store.Cancel(ctx, id)
			if err == nil && !ok {
				err = fmt.Errorf("timeout %s was not stored", id)
			}
			return err
		},
	}
	for _, s := range sides {
		if len(s.later) < len(steeringOps)*steeringCalls {
			return nil, fmt.Errorf("only %d timeouts not due for a day to steer", len(s.later))
		}
	}
	times := make([]map[string][]time.Duration, len(sides))
	for i := range times {
		times[i] = map[string][]time.Duration{}
	}
	for k, op := range steeringOps {
		call, ok := ops[op.name]
		if !ok {
			return nil, fmt.Errorf("no SQLite steering call named %s", op.name)
		}
		list := op.name == "list" || op.name == "list_after"
		began := time.Now()
		for n := range steeringCalls {
			if list && n >= sqliteListCalls && time.Since(began) > sqliteListBudget {
				break
			}
			for i, s := range sides {
				id := s.later[k*steeringCalls+n]
				start := time.Now()
				if err := call(ctx, s, id); err != nil {
					return nil, fmt.Errorf("%s: %w", op.name, err)
				}
				times[i][op.name] = append(times[i][op.name], time.Since(start))
			}
		}
	}
	p50 := make([]map[string]steered, len(sides))
	for i := range sides {
		p50[i] = map[string]steered{}
		for name, ds := range times[i] {
			slices.Sort(ds)
			p50[i][name] = steered{p50: ds[len(ds)/2], calls: len(ds)}
		}
	}
	return p50, nil
}

// steered is one steering call's p50 on one side, and how many calls were timed.
type steered struct {
	p50   time.Duration
	calls int
}

// ioBytes are bytes passed to read and write calls.
type ioBytes struct{ read, written int64 }

// readIO is the bytes this process has passed to read and write calls (/proc/self/io rchar and
// wchar): what SQLite appends to the WAL, copies into the database file and reads back from it,
// whatever the file system and its cache.
func readIO() (ioBytes, error) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return ioBytes{}, fmt.Errorf("reading the bytes read and written: %w", err)
	}
	defer f.Close()
	var io ioBytes
	var found int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		field, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || field != "rchar" && field != "wchar" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return ioBytes{}, fmt.Errorf("reading the bytes read and written: %s: %w", field, err)
		}
		if field == "rchar" {
			io.read = n
		} else {
			io.written = n
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return ioBytes{}, fmt.Errorf("reading the bytes read and written: %w", err)
	}
	if found != 2 {
		return ioBytes{}, errors.New("reading the bytes read and written: no rchar and wchar in /proc/self/io")
	}
	return io, nil
}

// sqliteScaleTargets holds the SQLite store at 1 M pending to the empty one measured beside it:
// the batch store rate within 25 %, one claim's p99 (checkpoints included) within 2×, and each
// steering call's p50 within 2×.
func sqliteScaleTargets(results []Result) []Target {
	var small, large Result
	var haveSmall, haveLarge bool
	for _, r := range results {
		if r.Kind != KindScale || r.NotRun != "" || !strings.HasPrefix(r.System, "SQLite store") {
			continue
		}
		if r.Figures["pending"] == 0 {
			small, haveSmall = r, true
		} else {
			large, haveLarge = r, true
		}
	}
	storeT := Target{Goal: "SQLite at 1 M pending: batch store rate within 25 % of the empty store's", Met: "—", Measured: notMeasured}
	claimT := Target{Goal: "SQLite at 1 M pending: one claim's p99 ≤ 2× the empty store's", Met: "—", Measured: notMeasured}
	steerT := Target{Goal: "SQLite at 1 M pending: each steering call's p50 ≤ 2× the empty store's", Met: "—", Measured: notMeasured}
	if haveSmall && haveLarge {
		s0, s1 := small.Figures["store"], large.Figures["store"]
		if s0 > 0 {
			storeT.Measured = fmt.Sprintf("%s/s empty, %s/s at %s pending (%+.0f %%); %s and %s written per timeout; %s and %s read",
				rate(s0), rate(s1), count(int(large.Figures["pending"])), 100*(s1-s0)/s0,
				kib(small.Figures["written_per_timeout_b"]), kib(large.Figures["written_per_timeout_b"]),
				kib(small.Figures["read_per_timeout_b"]), kib(large.Figures["read_per_timeout_b"]))
			storeT.Measured += orderedNote(small, large)
			storeT.Met = verdict(s1 >= 0.75*s0)
		}
		p99, p99Empty := large.Figures["claim_p99_ms"], small.Figures["claim_p99_ms"]
		claimT.Measured = fmt.Sprintf("claim of %d due ids: p99 %.1f ms, p50 %.1f ms (empty store: p99 %.1f ms, p50 %.1f ms)",
			scaleClaimBatch, p99, large.Figures["claim_p50_ms"], p99Empty, small.Figures["claim_p50_ms"])
		claimT.Met = verdict(p99 <= 2*p99Empty)
		// Three decimals: SQLite's lookups take tens of microseconds.
		steerT.Measured, steerT.Met = steering(large, small, 3)
	}
	return []Target{storeT, claimT, steerT}
}
