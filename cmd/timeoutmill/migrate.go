package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/nativemigrate"
)

type migrateCmd struct {
	To          string `required:"" enum:"rabbitmq-native,nats-native" help:"Where the timeouts go: rabbitmq-native (RabbitMQ's 28 delay levels, --transport amqp://…) or nats-native (JetStream's message schedules, --transport nats://…)."`
	storeFlags  `embed:""`
	nativeFlags `embed:""`

	Cutoff           string        `help:"Migrate only timeouts due at or after this time (RFC 3339, or a duration from now such as 24h); earlier ones stay for the timeout manager. Default: all, past-due ones sent at once." placeholder:"T"`
	Batch            int           `default:"1000" help:"Timeouts hidden, sent and removed per batch."`
	Workers          int           `default:"8" help:"Batches in flight at once."`
	DryRun           bool          `help:"Run the preflight and say what would be migrated; change nothing."`
	SkipUnmigratable bool          `help:"Go ahead when some timeouts cannot be migrated (missing destination, delay too long); they stay in the store and are listed."`
	FinishTimeout    time.Duration `default:"30s" help:"On SIGINT/SIGTERM, how long to finish the batches in flight before putting the rest back."`
}

// Run migrates the endpoint's stored timeouts to the native delay.
func (c *migrateCmd) Run(e *env) error {
	if c.Batch <= 0 || c.Workers <= 0 {
		return fmt.Errorf("%w: --batch and --workers must be positive", connect.ErrInvalid)
	}
	cutoff, err := parseCutoff(c.Cutoff, time.Now())
	if err != nil {
		return err
	}
	logger := newLogger(e)
	store, err := c.openExistingStore(e.ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	target, closeTarget, err := c.target(logger)
	if err != nil {
		return err
	}
	defer closeTarget()

	cfg := nativemigrate.MigrationConfig{
		Store: store, Target: target, Cutoff: cutoff, BatchSize: c.Batch, Workers: c.Workers,
		SkipUnmigratable: c.SkipUnmigratable, FinishTimeout: c.FinishTimeout, Logger: logger,
	}
	where := c.describe()
	if c.To == "nats-native" {
		where = c.describeNATS()
	}
	fmt.Fprintf(e.stdout, "store:      %s (endpoint %s)\nbroker:     %s\n", connect.Redact(c.Store), c.Endpoint, where)
	if c.DryRun {
		pf, err := nativemigrate.Check(e.ctx, cfg)
		if err != nil {
			return connect.RedactError(err, c.Transport)
		}
		c.printPreflight(e.stdout, pf, cutoff)
		if !pf.Ready(c.SkipUnmigratable) {
			return fmt.Errorf("preflight: %d problem(s), listed above", len(pf.Problems()))
		}
		fmt.Fprintln(e.stdout, "dry run:    nothing changed; run again without --dry-run to migrate")
		return nil
	}

	progress := newProgressReporter(e.stderr)
	cfg.OnPreflight = func(pf nativemigrate.Preflight) { c.printPreflight(e.stdout, pf, cutoff) }
	cfg.OnProgress = progress.update
	res, err := nativemigrate.Migrate(e.ctx, cfg)
	progress.finish()
	if errors.Is(err, nativemigrate.ErrPreflight) {
		return fmt.Errorf("preflight: %d problem(s), listed above; nothing changed", len(res.Preflight.Problems()))
	}
	if !res.Preflight.Now.IsZero() {
		printResult(e.stdout, res)
	}
	if err != nil {
		return connect.RedactError(err, c.Transport)
	}
	return nil
}

// target opens the native delay --to names, on --transport; call closeTarget when done.
func (c *migrateCmd) target(logger watermill.LoggerAdapter) (target nativemigrate.Target, closeTarget func(), err error) {
	if (c.To == "nats-native") != c.isNATS() {
		return nil, nil, fmt.Errorf("%w: --to %s needs %s --transport", connect.ErrInvalid, c.To, map[bool]string{true: "a nats://", false: "an amqp://"}[c.To == "nats-native"])
	}
	if c.To == "nats-native" {
		pub, err := c.natsPublisher(logger)
		if err != nil {
			return nil, nil, err
		}
		return nativemigrate.NATS(pub), func() { _ = pub.Close() }, nil
	}
	pub, err := c.publisher(logger, c.Workers)
	if err != nil {
		return nil, nil, err
	}
	return nativemigrate.RabbitMQ(pub), func() { _ = pub.Close() }, nil
}

// parseCutoff reads --cutoff: RFC 3339, or a duration from now; empty for none.
func parseCutoff(value string, now time.Time) (time.Time, error) {
	if value == "" {
		return time.Time{}, nil
	}
	return parseWhen("--cutoff", value, now)
}

func (c *migrateCmd) printPreflight(w io.Writer, pf nativemigrate.Preflight, cutoff time.Time) {
	which := "all"
	if !cutoff.IsZero() {
		which = "due at or after " + cutoff.UTC().Format(time.RFC3339)
	}
	sv := pf.Survey
	fmt.Fprintf(w, "timeouts:   %d (%s) to %d destination(s)", sv.Count, which, len(sv.Destinations))
	if sv.Count > 0 {
		fmt.Fprintf(w, ", the latest due %s", sv.Latest.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(w)
	if sv.Hidden > 0 {
		again := "those it had sent arrive twice"
		if c.To == "nats-native" {
			again = "a schedule sent again replaces its own; only those due already, sent at once, may arrive twice"
		}
		fmt.Fprintf(w, "resuming:   %d hidden by a migration that stopped; they are sent again (%s)\n", sv.Hidden, again)
	}
	problems := pf.Problems()
	if len(problems) == 0 {
		fmt.Fprintln(w, "preflight:  ok")
		return
	}
	fmt.Fprintf(w, "preflight:  %d problem(s)\n", len(problems))
	for _, p := range problems {
		fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(p, "\n", "\n  "))
	}
	if pf.Ready(c.SkipUnmigratable) {
		fmt.Fprintln(w, "            --skip-unmigratable: the timeouts these concern stay in the store")
	} else if pf.Topology == nil {
		fmt.Fprintln(w, "            fix them, or rerun with --skip-unmigratable to leave those timeouts in the store and migrate the others")
	}
}

func printResult(w io.Writer, res nativemigrate.Result) {
	rate := float64(res.Migrated) / max(res.Elapsed.Seconds(), 1e-9)
	fmt.Fprintf(w, "migrated:   %d in %s (%.0f/s)\n", res.Migrated, res.Elapsed.Round(time.Millisecond), rate)
	if res.AlreadyGone > 0 {
		fmt.Fprintf(w, "gone:       %d were dispatched or cancelled while being migrated (each may arrive twice)\n", res.AlreadyGone)
	}
	if n := res.Released - len(res.Unmigratable); n > 0 {
		fmt.Fprintf(w, "put back:   %d not sent, left for the timeout manager\n", n)
	}
	if len(res.NotRemoved) > 0 {
		fmt.Fprintf(w, "not removed: %d sent but still hidden in the store (a rerun sends them again): %s\n", len(res.NotRemoved), strings.Join(res.NotRemoved, ", "))
	}
	if len(res.Unmigratable) == 0 {
		return
	}
	fmt.Fprintf(w, "unmigratable: %d left in the store for the timeout manager, by reason:\n", len(res.Unmigratable))
	byReason := map[string][]string{}
	var reasons []string
	for _, u := range res.Unmigratable {
		if _, ok := byReason[u.Reason]; !ok {
			reasons = append(reasons, u.Reason)
		}
		byReason[u.Reason] = append(byReason[u.Reason], u.ID)
	}
	slices.Sort(reasons)
	for _, reason := range reasons {
		ids := byReason[reason]
		slices.Sort(ids)
		fmt.Fprintf(w, "  %s (%d):\n", reason, len(ids))
		line := "   "
		for _, id := range ids {
			if len(line)+len(id) > 100 {
				fmt.Fprintln(w, line)
				line = "   "
			}
			line += " " + id
		}
		fmt.Fprintln(w, line)
	}
}

// progressReporter shows a migration's progress: a bar with count, rate and ETA on a terminal,
// otherwise a plain line at most every few seconds.
type progressReporter struct {
	mu    sync.Mutex
	out   io.Writer
	tty   bool
	bar   *progressbar.ProgressBar // made at the first update, when the total is known
	last  time.Time
	every time.Duration
	seen  nativemigrate.Progress
}

func newProgressReporter(out io.Writer) *progressReporter {
	f, ok := out.(*os.File)
	return &progressReporter{out: out, tty: ok && term.IsTerminal(int(f.Fd())), every: 5 * time.Second}
}

func (r *progressReporter) newBar(total int64) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(r.out),
		progressbar.OptionSetDescription("migrating"),
		progressbar.OptionSetItsString("timeouts"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetWidth(30),
	)
}

func (r *progressReporter) update(p nativemigrate.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = p
	if r.tty {
		total := int64(max(p.Total, p.Done))
		if r.bar == nil {
			r.bar = r.newBar(total)
		} else if r.bar.GetMax64() != total {
			r.bar.ChangeMax64(total)
		}
		_ = r.bar.Set64(int64(p.Done)) // the bar only draws
		return
	}
	if time.Since(r.last) >= r.every {
		r.last = time.Now()
		r.line(p)
	}
}

func (r *progressReporter) line(p nativemigrate.Progress) {
	rate := float64(p.Done) / max(p.Elapsed.Seconds(), 1e-9)
	eta := "?"
	if rate > 0 && p.Total > p.Done {
		eta = time.Duration(float64(p.Total-p.Done) / rate * float64(time.Second)).Round(time.Second).String()
	} else if p.Total <= p.Done {
		eta = "0s"
	}
	fmt.Fprintf(r.out, "progress: %d/%d timeouts (%d migrated), %.0f/s, ETA %s\n", p.Done, p.Total, p.Migrated, rate, eta)
}

// finish ends the bar, or prints the last plain line.
func (r *progressReporter) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bar != nil {
		if r.seen.Done >= r.seen.Total {
			_ = r.bar.Finish()
		} else {
			_ = r.bar.Exit() // interrupted: keep what was done
		}
		fmt.Fprintln(r.out)
		return
	}
	if r.seen.Done > 0 {
		r.line(r.seen)
	}
}
