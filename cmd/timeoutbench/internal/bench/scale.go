package bench

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// Scale scenario settings.
const (
	// scaleDueRows of the pending timeouts are past due, for the claims to take.
	scaleDueRows = 10000
	// scalePayloadBytes is the size of the payload of every timeout of the scenario, filled or
	// stored by the service: a small JSON document, as a timeout in production carries. The
	// other scenarios send 64 bytes; at a million rows the size decides how much of the table
	// the database keeps in memory (its claim updates rows in place, copying inline payloads).
	scalePayloadBytes = 1024
	// md5Bytes is what one md5() adds to a filled payload.
	md5Bytes = 16
	// Claims take scaleClaimBatch ids each (the poller's default batch); the first scaleWarmUp
	// are not timed, and scaleClaims idle polls are timed after the due ids are all claimed.
	scaleClaimBatch = timeouts.DefaultClaimBatchSize
	scaleWarmUp     = 2
	scaleClaims     = 20
	// scaleRounds rounds of Plan.ScaleStores/scaleRounds delayed messages measure the store rate,
	// and the median round counts: shorter rounds, or fewer, differed widely between the two
	// stores with no change in the code.
	scaleRounds = 5
	// scaleOrderedRounds more rounds, of the same size, store messages with time-ordered ids.
	scaleOrderedRounds = 3
)

// runScale measures the PostgreSQL store and the timeoutmill service with an empty store and with
// Plan.ScalePending timeouts pending: the rate at which the service stores delayed messages, the
// time of one claim of due ids and of an idle poll, and the service's peak resident memory. The
// two stores (two endpoints) are measured in turns, claim by claim and round by round, so that a
// change in the machine's load touches both alike.
func runScale(ctx context.Context, env Env, plan Plan) ([]Result, error) {
	if env.Timeoutmill == "" {
		return nil, errors.New("no timeoutmill binary to run as the service (-timeoutmill)")
	}
	var sides []*scale
	defer func() {
		for _, s := range sides {
			if err := s.close(); err != nil {
				env.logger().Error("Cleaning up after the scale scenario failed", err, nil)
			}
		}
	}()
	for range 2 {
		s, err := newScale(ctx, env)
		if err != nil {
			return nil, err
		}
		sides = append(sides, s)
	}
	empty, full := sides[0], sides[1]

	progress(env, "      filling a store with %s timeouts", count(plan.ScalePending))
	start := time.Now()
	indexed, err := full.bulkLoad(ctx, plan.ScalePending)
	if err != nil {
		return nil, err
	}
	filled := time.Since(start)
	diskPerMillion, err := full.diskPerMillion(ctx, plan.ScalePending)
	if err != nil {
		return nil, err
	}
	progress(env, "      filled in %s (indexes built in %s)", filled.Round(time.Second), indexed.Round(time.Second))
	// Claims need due ids: give the empty store as many as the full one has, then empty it.
	if err := empty.fill(ctx, scaleDueRows); err != nil {
		return nil, err
	}
	claims, polls, err := timeClaims(ctx, sides)
	if err != nil {
		return nil, err
	}
	// The empty store steers as many timeouts as it is given: the due ids it held, claimed for an
	// hour, are replaced by a few not due for a day.
	if err := empty.truncate(ctx); err != nil {
		return nil, err
	}
	if err := empty.fillLater(ctx, len(steeringOps)*steeringCalls); err != nil {
		return nil, err
	}
	steering, err := timeSteering(ctx, sides)
	if err != nil {
		return nil, err
	}
	stats, err := timeStats(ctx, sides)
	if err != nil {
		return nil, err
	}
	overviews, err := timeOverview(ctx, sides)
	if err != nil {
		return nil, err
	}
	if err := empty.truncate(ctx); err != nil {
		return nil, err
	}

	var services []*service
	defer func() {
		for _, svc := range services {
			_ = svc.stop()
		}
	}()
	for _, s := range sides {
		svc, err := s.startService(ctx)
		if err != nil {
			return nil, err
		}
		services = append(services, svc)
	}
	rates := make([][]float64, len(sides))
	ordered := make([][]float64, len(sides))
	wal := make([]walUse, len(sides))
	// A store rate that cannot be measured (the service stopped on a critical error, say) leaves
	// the rows with what was measured before it, and says why.
	var rateErr error
	// The rounds with random ids (as watermill.NewUUID makes them) come first and decide the
	// target; then rounds with time-ordered ids (watermill.NewULID), which the docs recommend to
	// senders of large stores: each new id lands beside the last in the primary key.
rounds:
	for round := range scaleRounds + scaleOrderedRounds {
		random := round < scaleRounds
		newID := watermill.NewUUID
		if !random {
			newID = watermill.NewULID
		}
		// The side that goes first changes from round to round, so that neither is always the
		// one measured on a broker and database warmed by the other.
		for turn := range sides {
			i := (turn + round) % len(sides)
			rate, used, err := sides[i].storeRate(ctx, plan.ScaleStores/scaleRounds, services[i], newID)
			if err != nil {
				rateErr = err
				break rounds
			}
			if random {
				rates[i] = append(rates[i], rate)
				wal[i] = wal[i].add(used)
			} else {
				ordered[i] = append(ordered[i], rate)
			}
		}
	}
	var results []Result
	for i, s := range sides {
		hwm, rss, err := services[i].memory()
		if err != nil && rateErr == nil {
			return nil, err
		}
		pending := 0
		if s == full {
			pending = plan.ScalePending
		}
		if rateErr != nil {
			rates[i], ordered[i] = nil, nil
		}
		r := scaleResult(plan, pending, claims[i], polls[i], rates[i], steering[i], hwm, rss)
		walNote(&r, wal[i], ordered[i])
		statsNote(&r, stats[i])
		overviewNote(&r, overviews[i])
		if rateErr != nil {
			r.Notes = append(r.Notes, "store rate and memory not measured: "+rateErr.Error())
		}
		results = append(results, r)
	}
	for _, svc := range services {
		if err := svc.stop(); err != nil && rateErr == nil {
			return nil, err
		}
	}
	services = nil
	results[1].Notes = append(results[1].Notes,
		fmt.Sprintf("filled by SQL in %s as a bulk load does it: rows first, then the store's own indexes rebuilt (%s), then VACUUM ANALYZE; random UUIDs, %d-byte payloads, 1 in %d due, scattered",
			filled.Round(time.Second), indexed.Round(time.Second), scalePayloadBytes, max(1, plan.ScalePending/scaleDueRows)),
		fmt.Sprintf("disk: %.0f MiB per million pending (table, indexes and TOAST)", diskPerMillion))
	results[1].Figures["disk_mib_per_million"] = diskPerMillion
	return results, nil
}

// scaleResult is the row of one store.
func scaleResult(plan Plan, pending int, claims, polls []time.Duration, rates []float64, steering map[string]time.Duration, hwm, rss int) Result {
	slices.Sort(claims)
	slices.Sort(polls)
	slices.Sort(rates)
	r := Result{
		System: fmt.Sprintf("PostgreSQL store, %s pending", count(pending)), Kind: KindScale,
		Messages: plan.ScaleStores,
		Figures: map[string]float64{
			"pending":      float64(pending),
			"claim_p50_ms": float64(claims[len(claims)/2]) / float64(time.Millisecond),
			"claim_max_ms": float64(claims[len(claims)-1]) / float64(time.Millisecond),
			"poll_p50_ms":  float64(polls[len(polls)/2]) / float64(time.Millisecond),
		},
	}
	if len(rates) > 0 {
		r.PublishRate = rates[len(rates)/2]
		r.Figures["store"] = rates[len(rates)/2]
		r.Figures["rss_mib"] = float64(hwm) / 1024
		r.Notes = append(r.Notes,
			fmt.Sprintf("publish/s = the service's store rate, median of %d rounds of %d delayed messages via RabbitMQ (%s–%s/s)",
				len(rates), plan.ScaleStores/scaleRounds, rate(rates[0]), rate(rates[len(rates)-1])),
			fmt.Sprintf("service peak RSS %.1f MiB (%.1f MiB at the end)", float64(hwm)/1024, float64(rss)/1024))
	}
	r.Notes = append(r.Notes,
		fmt.Sprintf("one claim of %d due ids: p50 %s ms, max %s ms (%d claims after %d to warm up)",
			scaleClaimBatch, millis(claims[len(claims)/2]), millis(claims[len(claims)-1]), len(claims), scaleWarmUp),
		fmt.Sprintf("poll with nothing due (claim + next): p50 %s ms", millis(polls[len(polls)/2])))
	steer := fmt.Sprintf("steering p50 of %d calls each, in ms:", steeringCalls)
	for _, op := range steeringOps {
		r.Figures[op.name+"_p50_ms"] = float64(steering[op.name]) / float64(time.Millisecond)
		steer += fmt.Sprintf(" %s %s", op.name, millis(steering[op.name]))
	}
	r.Notes = append(r.Notes, steer)
	return r
}

// scale is the scenario's endpoint, store and broker.
type scale struct {
	env      Env
	endpoint string
	store    *postgres.Store
	db       *sql.DB
	table    string
	pub      *amqptransport.Publisher
	delayed  *timeouts.Publisher
}

func newScale(ctx context.Context, env Env) (*scale, error) {
	s := &scale{env: env, endpoint: endpointName()}
	var err error
	if s.store, err = postgres.Open(ctx, postgres.Config{DSN: env.PostgresDSN, Endpoint: s.endpoint}); err != nil {
		return nil, fmt.Errorf("opening the store: %w", err)
	}
	s.db = s.store.DB()
	s.table = quote("public") + "." + quote(s.endpoint+".timeouts")
	if err := s.store.SetupInfrastructure(ctx); err != nil {
		return nil, errors.Join(err, s.close())
	}
	if s.pub, err = amqptransport.NewPublisher(amqptransport.Config{URL: env.AMQPURL, ConnectionName: "timeoutbench scale"}, env.logger()); err != nil {
		return nil, errors.Join(err, s.close())
	}
	if err := s.pub.DeclareEndpoint(ctx, s.endpoint, s.errorQueue()); err != nil {
		return nil, errors.Join(err, s.close())
	}
	if s.delayed, err = timeouts.NewPublisher(s.pub, s.endpoint); err != nil {
		return nil, errors.Join(err, s.close())
	}
	return s, nil
}

func (s *scale) errorQueue() string { return s.endpoint + ".error" }

func (s *scale) close() error {
	var errs []error
	if s.pub != nil {
		errs = append(errs, s.pub.Close(),
			deleteQueues(s.env.AMQPURL, wire.TimeoutsQueue(s.endpoint), wire.DispatcherQueue(s.endpoint), s.errorQueue()))
	}
	if s.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The counts' tables and trigger function go with the table: nothing of the row stays.
		for _, drop := range []string{`DROP TABLE IF EXISTS ` + s.table,
			`DROP TABLE IF EXISTS ` + quote("public") + "." + quote(s.endpoint+".timeouts_counts"),
			`DROP TABLE IF EXISTS ` + quote("public") + "." + quote(s.endpoint+".timeouts_dues"),
			`DROP TABLE IF EXISTS ` + quote("public") + "." + quote(s.endpoint+".timeouts_owners"),
			`DROP TABLE IF EXISTS ` + quote("public") + "." + quote(s.endpoint+".timeouts_owner_deltas"),
			`DROP FUNCTION IF EXISTS ` + quote("public") + "." + quote(s.endpoint+".timeouts_count") + `()`} {
			if _, err := s.db.ExecContext(ctx, drop); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", drop, err))
			}
		}
		errs = append(errs, s.store.Close())
	}
	return errors.Join(errs...)
}

func (s *scale) truncate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `TRUNCATE `+s.table); err != nil {
		return fmt.Errorf("emptying the store: %w", err)
	}
	return nil
}

// fill inserts n timeouts in one statement, as a store that has been in use would hold them:
// random UUIDs for ids (as watermill.NewUUID makes them), payloads of scalePayloadBytes, and one
// row in every n/scaleDueRows past due, the others due at random over the next 30 days, so that
// the due rows lie scattered through the table and its indexes rather than side by side.
func (s *scale) fill(ctx context.Context, n int) error {
	return s.fillOn(ctx, s.db, n)
}

// fillOn is fill on db, a pool or one connection of it.
func (s *scale) fillOn(ctx context.Context, db interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}, n int) error {
	md := persistence.EncodeMetadata(map[string]string{"timeoutbench": "fill"})
	_, err := db.ExecContext(ctx, `INSERT INTO `+s.table+` (id, destination, due, available_at, owner, payload, metadata, failure_count)
SELECT gen_random_uuid()::text, 'timeoutbench_nowhere', d, d, '', decode(repeat(md5(random()::text), $4::int), 'hex'), $1, 0
FROM generate_series(1, $2::int) AS g,
LATERAL (SELECT CASE WHEN g % $3::int = 0 THEN now() - interval '1 hour' + random() * interval '59 min'
                     ELSE now() + interval '1 day' + random() * interval '30 days' END AS d) AS due`,
		md, n, max(1, n/scaleDueRows), scalePayloadBytes/md5Bytes)
	if err != nil {
		return fmt.Errorf("filling the store: %w", err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE `+s.table); err != nil {
		return fmt.Errorf("analyzing the store: %w", err)
	}
	return nil
}

// bulkLoad fills the store with n timeouts as fill does, the way a bulk load (pg_restore, a
// migration) fills a large table: it drops the table's indexes and primary key, inserts the
// rows, builds the same indexes again from their definitions, then vacuums and analyzes, as
// autovacuum would have by the time a table this size is in use. Inserting millions of random
// UUIDs into a primary key index larger than the cache costs a random page write per row; the
// indexes built after hold the same entries. It returns how long building the indexes took.
func (s *scale) bulkLoad(ctx context.Context, n int) (time.Duration, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("bulk load: %w", err)
	}
	defer conn.Close()
	var pkName, pkDef string
	if err := conn.QueryRowContext(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = $1::regclass AND contype = 'p'`, s.table).Scan(&pkName, &pkDef); err != nil {
		return 0, fmt.Errorf("bulk load: reading the primary key: %w", err)
	}
	var names, indexes []string
	rows, err := conn.QueryContext(ctx, `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname), pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.indrelid = $1::regclass AND NOT i.indisprimary ORDER BY i.indexrelid`, s.table)
	if err != nil {
		return 0, fmt.Errorf("bulk load: reading the indexes: %w", err)
	}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			rows.Close()
			return 0, fmt.Errorf("bulk load: reading the indexes: %w", err)
		}
		names, indexes = append(names, name), append(indexes, def)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("bulk load: reading the indexes: %w", err)
	}
	for _, name := range names {
		if _, err := conn.ExecContext(ctx, `DROP INDEX `+name); err != nil {
			return 0, fmt.Errorf("bulk load: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, `ALTER TABLE `+s.table+` DROP CONSTRAINT `+quote(pkName)); err != nil {
		return 0, fmt.Errorf("bulk load: %w", err)
	}
	if err := s.fillOn(ctx, conn, n); err != nil {
		return 0, err
	}
	start := time.Now()
	// As a restore would: memory for sorting the index builds, on this session only.
	if _, err := conn.ExecContext(ctx, `SET maintenance_work_mem = '512MB'`); err != nil {
		return 0, fmt.Errorf("bulk load: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `ALTER TABLE `+s.table+` ADD CONSTRAINT `+quote(pkName)+` `+pkDef); err != nil {
		return 0, fmt.Errorf("bulk load: rebuilding the primary key: %w", err)
	}
	for _, def := range indexes {
		if _, err := conn.ExecContext(ctx, def); err != nil {
			return 0, fmt.Errorf("bulk load: rebuilding an index: %w", err)
		}
	}
	indexed := time.Since(start)
	if _, err := conn.ExecContext(ctx, `VACUUM (ANALYZE) `+s.table); err != nil {
		return 0, fmt.Errorf("bulk load: vacuuming: %w", err)
	}
	return indexed, nil
}

// diskPerMillion is the store's size on disk (table, indexes, TOAST) in MiB per million of the
// n timeouts it holds.
func (s *scale) diskPerMillion(ctx context.Context, n int) (float64, error) {
	var bytes int64
	if err := s.db.QueryRowContext(ctx, `SELECT pg_total_relation_size($1::regclass)`, s.table).Scan(&bytes); err != nil {
		return 0, fmt.Errorf("measuring the store's size: %w", err)
	}
	return float64(bytes) / (1 << 20) / (float64(max(1, n)) / 1e6), nil
}

// fillLater inserts n timeouts due in 2 to 32 days, as fill makes them. The subquery names g, or
// PostgreSQL would draw its random() once for every row.
func (s *scale) fillLater(ctx context.Context, n int) error {
	md := persistence.EncodeMetadata(map[string]string{"timeoutbench": "fill"})
	_, err := s.db.ExecContext(ctx, `INSERT INTO `+s.table+` (id, destination, due, available_at, owner, payload, metadata, failure_count)
SELECT gen_random_uuid()::text, 'timeoutbench_nowhere', d, d, '', decode(repeat(md5(random()::text), $3::int), 'hex'), $1, 0
FROM generate_series(1, $2::int) AS g,
LATERAL (SELECT now() + interval '2 days' + random() * interval '30 days' + g * interval '0 s' AS d) AS due`, md, n, scalePayloadBytes/md5Bytes)
	if err != nil {
		return fmt.Errorf("filling the store: %w", err)
	}
	return nil
}

// timeClaims claims due ids from each side in turn, timing each claim after scaleWarmUp untimed
// ones, until none is due, then times scaleClaims polls on each that find nothing due (ClaimDue
// and Next, as the poller does). The claimed ids stay leased for an hour, out of the services' way.
func timeClaims(ctx context.Context, sides []*scale) (claims, polls [][]time.Duration, err error) {
	claims = make([][]time.Duration, len(sides))
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
			if round >= scaleWarmUp {
				claims[i] = append(claims[i], d)
			}
		}
		if !active {
			break
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

// timeIdlePolls times scaleClaims polls on each store that find nothing due (ClaimDue and Next,
// as the poller does), after claims emptied them; a store that gave no claim to time is an error.
func timeIdlePolls(ctx context.Context, stores []persistence.Store, claims [][]time.Duration) ([][]time.Duration, error) {
	for i := range stores {
		if len(claims[i]) == 0 {
			return nil, errors.New("no due timeouts to claim")
		}
	}
	polls := make([][]time.Duration, len(stores))
	for range scaleClaims {
		for i, store := range stores {
			start := time.Now()
			ids, err := store.ClaimDue(ctx, start, scaleClaimBatch, time.Hour)
			if err == nil {
				_, _, err = store.Next(ctx)
			}
			if err != nil {
				return nil, fmt.Errorf("polling: %w", err)
			}
			if len(ids) > 0 {
				return nil, errors.New("a poll claimed timeouts after all were claimed")
			}
			polls[i] = append(polls[i], time.Since(start))
		}
	}
	return polls, nil
}

// storeRate publishes n delayed messages, with ids from newID, to svc and returns how many a
// second it stored and the WAL the database wrote meanwhile.
func (s *scale) storeRate(ctx context.Context, n int, svc *service, newID func() string) (float64, walUse, error) {
	due := time.Now().Add(90 * 24 * time.Hour)
	var before int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+s.table+` WHERE available_at >= $1`, due.Add(-time.Hour)).Scan(&before); err != nil {
		return 0, walUse{}, fmt.Errorf("counting stored timeouts: %w", err)
	}
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(newID(), scalePayload())
		timeouts.DeliverAt(msgs[i], due)
	}
	walBefore, err := s.walNow(ctx)
	if err != nil {
		return 0, walUse{}, err
	}
	start := time.Now()
	if _, err := publishChunks(msgs, 8, 100, func(ms []*message.Message) error {
		return s.delayed.Publish("timeoutbench_nowhere", ms...)
	}); err != nil {
		return 0, walUse{}, fmt.Errorf("publishing: %w", err)
	}
	deadline := start.Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var stored int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+s.table+` WHERE available_at >= $1`, due.Add(-time.Hour)).Scan(&stored); err != nil {
			return 0, walUse{}, fmt.Errorf("counting stored timeouts: %w", err)
		}
		if stored >= before+n {
			rate := float64(n) / time.Since(start).Seconds()
			walAfter, err := s.walNow(ctx)
			if err != nil {
				return 0, walUse{}, err
			}
			return rate, walUse{stored: n, bytes: walAfter.bytes - walBefore.bytes, fullPages: walAfter.fullPages - walBefore.fullPages}, nil
		}
		select {
		case err := <-svc.done:
			svc.done <- err // for stop
			return 0, walUse{}, fmt.Errorf("the service exited (%v) after storing %d of %d: %s", err, stored-before, n, lastLine(svc.log))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return 0, walUse{}, fmt.Errorf("the service stored fewer than %d in 5 minutes", n)
}

// walUse is the WAL a database wrote while timeouts were stored: its bytes, and the full-page
// images among them (a page's first change after a checkpoint logs the whole page).
type walUse struct {
	stored    int
	bytes     int64
	fullPages int64
}

func (w walUse) add(o walUse) walUse {
	return walUse{stored: w.stored + o.stored, bytes: w.bytes + o.bytes, fullPages: w.fullPages + o.fullPages}
}

// walNow reads the database server's WAL counters (pg_stat_wal, PostgreSQL 14 and later). They
// count the whole server, so the two stores, measured in turns, each see only their own rounds.
func (s *scale) walNow(ctx context.Context) (walUse, error) {
	var w walUse
	if err := s.db.QueryRowContext(ctx, `SELECT wal_bytes::bigint, wal_fpi FROM pg_stat_wal`).Scan(&w.bytes, &w.fullPages); err != nil {
		return walUse{}, fmt.Errorf("reading pg_stat_wal: %w", err)
	}
	return w, nil
}

// walNote adds to r the WAL per stored timeout of the rounds with random ids, and the store rate
// of the rounds with time-ordered ids.
func walNote(r *Result, w walUse, ordered []float64) {
	if w.stored > 0 {
		kib := float64(w.bytes) / 1024 / float64(w.stored)
		fpi := float64(w.fullPages) / float64(w.stored)
		r.Figures["wal_kib_per_stored"] = kib
		r.Figures["full_pages_per_stored"] = fpi
		r.Notes = append(r.Notes, fmt.Sprintf("WAL per stored timeout (random ids): %.1f KiB, %.2f full-page images", kib, fpi))
	}
	if len(ordered) > 0 {
		slices.Sort(ordered)
		r.Figures["store_ordered"] = ordered[len(ordered)/2]
		r.Notes = append(r.Notes, fmt.Sprintf("store rate with time-ordered ids (watermill.NewULID): %s/s, median of %d rounds (%s–%s/s)",
			rate(ordered[len(ordered)/2]), len(ordered), rate(ordered[0]), rate(ordered[len(ordered)-1])))
	}
}

// service is a running timeoutmill process.
type service struct {
	cmd  *exec.Cmd
	done chan error
	log  string
}

func (s *scale) startService(ctx context.Context) (*service, error) {
	logPath := filepath.Join(s.env.TempDir, s.endpoint+"-service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.env.Timeoutmill, "run",
		"--endpoint", s.endpoint, "--store", s.env.PostgresDSN, "--transport", s.env.AMQPURL,
		"--error-queue", s.errorQueue(), "--log-level", "error")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", s.env.Timeoutmill, err)
	}
	svc := &service{cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() {
		svc.done <- cmd.Wait()
		_ = logFile.Close()
	}()
	// Ready when it consumes the Timeouts queue.
	deadline := time.Now().Add(time.Minute)
	for {
		consumers, err := queueConsumers(s.env.AMQPURL, wire.TimeoutsQueue(s.endpoint))
		if err == nil && consumers > 0 {
			return svc, nil
		}
		select {
		case err := <-svc.done:
			return nil, fmt.Errorf("the service exited (%v); see %s", err, logPath)
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), svc.stop())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("the service did not consume within a minute; see %s", logPath), svc.stop())
		}
	}
}

// memory returns the process's peak and current resident set in KiB (VmHWM, VmRSS).
func (svc *service) memory() (hwm, rss int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", svc.cmd.Process.Pid))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the service's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		switch key {
		case "VmHWM":
			hwm, _ = strconv.Atoi(fields[0])
		case "VmRSS":
			rss, _ = strconv.Atoi(fields[0])
		}
	}
	return hwm, rss, sc.Err()
}

// stop ends the service with SIGTERM, as an operator would.
func (svc *service) stop() error {
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping the service: %w", err)
	}
	select {
	case err := <-svc.done:
		if err != nil {
			return fmt.Errorf("the service exited with %w; see %s", err, svc.log)
		}
		return nil
	case <-time.After(time.Minute):
		_ = svc.cmd.Process.Kill()
		return fmt.Errorf("the service did not stop within a minute; see %s", svc.log)
	}
}

func queueConsumers(url, queue string) (int, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return q.Consumers, err
}

// scalePayload is a JSON document of scalePayloadBytes with a random hex string in it. Like the
// fill's payloads, it stays inline in the row: PostgreSQL moves a value out of line (TOAST) only
// from about 2 KB.
func scalePayload() []byte {
	const prefix, suffix = `{"timeoutbench":"`, `"}`
	b := make([]byte, scalePayloadBytes-len(prefix)-len(suffix))
	for i := range b {
		b[i] = "0123456789abcdef"[rand.IntN(16)]
	}
	return []byte(prefix + string(b) + suffix)
}
