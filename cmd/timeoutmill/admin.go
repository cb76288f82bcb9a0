package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

type setupCmd struct {
	storeFlags     `embed:""`
	transportFlags `embed:""`
}

// Run creates the table and declares the queues.
func (c *setupCmd) Run(e *env) error {
	logger := newLogger(e)
	store, err := c.openStore(e.ctx, 0, logger, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	if installer, ok := store.(persistence.Installer); ok {
		if err := installer.SetupInfrastructure(e.ctx); err != nil {
			return fmt.Errorf("creating the table of %s: %w", c.Endpoint, connect.RedactError(err, c.Store))
		}
	}
	transport, err := connect.OpenTransportWith(e.ctx, c.Transport, c.transportOptions(), logger)
	if err != nil {
		return err
	}
	defer transport.Close()
	if transport.DeclareEndpoint != nil {
		if err := transport.DeclareEndpoint(e.ctx, c.Endpoint, c.ErrorQueue); err != nil {
			return fmt.Errorf("declaring the queues of %s: %w", c.Endpoint, connect.RedactError(err, c.Transport))
		}
	}
	fmt.Fprintf(e.stdout, "store ready: %s\nqueues ready: %s, %s, %s\n",
		connect.Redact(c.Store), wire.TimeoutsQueue(c.Endpoint), wire.DispatcherQueue(c.Endpoint), c.ErrorQueue)
	return nil
}

type statsCmd struct {
	storeFlags `embed:""`
	JSON       bool `name:"json" help:"Print one JSON object (fields in docs/operations.md) instead of text."`
}

// statsJSON is what stats --json prints. Its field names are part of the command's interface:
// fields may be added, never renamed or removed.
type statsJSON struct {
	Endpoint string `json:"endpoint"`
	Store    string `json:"store"`
	// At is when the numbers were read: the "now" of most_overdue_seconds.
	At      *string `json:"at"`
	Pending int     `json:"pending"`
	// EarliestDue and LatestDue are null when nothing is pending.
	EarliestDue *string `json:"earliest_due"`
	LatestDue   *string `json:"latest_due"`
	// MostOverdueSeconds is how long ago the earliest due time passed; 0 when none has.
	MostOverdueSeconds float64 `json:"most_overdue_seconds"`
	// DueNow counts the pending timeouts due at At; Claimed those a poller holds (being
	// delivered); ByDestination the pending timeouts of each destination.
	DueNow  int `json:"due_now"`
	Claimed int `json:"claimed"`
	// Parked counts the pending timeouts that are parked: they wait for an operator
	// (timeoutmill parked list|replay|delete).
	Parked        int            `json:"parked"`
	ByDestination map[string]int `json:"by_destination"`
}

// Run prints what the store holds.
func (c *statsCmd) Run(e *env) error {
	inspector, closeStore, err := c.inspector(e)
	if err != nil {
		return err
	}
	defer closeStore()
	now := time.Now()
	st, err := inspector.Stats(e.ctx, now)
	if err != nil {
		return connect.RedactError(err, c.Store)
	}
	if c.JSON {
		out := statsJSON{
			Endpoint: c.Endpoint, Store: connect.Redact(c.Store), At: formatJSONTime(now), Pending: st.Pending,
			EarliestDue: formatJSONTime(st.Earliest), LatestDue: formatJSONTime(st.Latest),
			DueNow: st.DueNow, Claimed: st.Claimed, Parked: st.Parked, ByDestination: st.ByDestination,
		}
		if out.ByDestination == nil {
			out.ByDestination = map[string]int{}
		}
		if st.Pending > 0 && st.Earliest.Before(now) {
			out.MostOverdueSeconds = now.Sub(st.Earliest).Seconds()
		}
		return writeJSON(e.stdout, out)
	}
	fmt.Fprintf(e.stdout, "endpoint:     %s\nstore:        %s\npending:      %d\n", c.Endpoint, connect.Redact(c.Store), st.Pending)
	if st.Pending == 0 {
		return nil
	}
	fmt.Fprintf(e.stdout, "next due:     %s\n", describeDue(st.Earliest, now))
	if st.Earliest.Before(now) {
		fmt.Fprintf(e.stdout, "most overdue: %s late\n", now.Sub(st.Earliest).Round(time.Millisecond))
	} else {
		fmt.Fprintln(e.stdout, "most overdue: none")
	}
	fmt.Fprintf(e.stdout, "last due:     %s\n", describeDue(st.Latest, now))
	fmt.Fprintf(e.stdout, "due now:      %d (%d being delivered)\n", st.DueNow, st.Claimed)
	if st.Parked > 0 {
		fmt.Fprintf(e.stdout, "parked:       %d (timeoutmill parked list)\n", st.Parked)
	} else {
		fmt.Fprintln(e.stdout, "parked:       0")
	}
	destinations := slices.SortedFunc(maps.Keys(st.ByDestination), func(a, b string) int { // busiest first
		return cmp.Or(cmp.Compare(st.ByDestination[b], st.ByDestination[a]), cmp.Compare(a, b))
	})
	for i, d := range destinations {
		label := ""
		if i == 0 {
			label = "destinations:"
		}
		fmt.Fprintf(e.stdout, "%-13s %d %s\n", label, st.ByDestination[d], d)
	}
	return nil
}

// listCmd lists pending timeouts. Each filter is a flag here and a field of
// persistence.ListOptions, joined in options.
type listCmd struct {
	storeFlags  `embed:""`
	Owner       string `help:"Only this owner's timeouts."`
	Destination string `help:"Only the timeouts for this destination."`
	Key         string `help:"Only the timeout holding this deduplication key."`
	DueAfter    string `name:"due-after" help:"Only timeouts due at or after this time: RFC 3339, or a duration from now (-1h)."`
	DueBefore   string `name:"due-before" help:"Only timeouts due before this time: RFC 3339, or a duration from now (24h)."`
	After       string `help:"Start after this timeout: the DUE,ID that the previous page printed as its next page."`
	Limit       int    `default:"100" help:"At most this many (at most 10000)."`
	JSON        bool   `name:"json" help:"Print one JSON object (fields in docs/operations.md) instead of a table."`
}

// maxListLimit bounds --limit, as timeouts.Manager.List bounds its limit.
const maxListLimit = 10_000

// options are the store's list options the flags ask for.
func (c *listCmd) options(now time.Time) (persistence.ListOptions, error) {
	if c.Limit <= 0 || c.Limit > maxListLimit {
		return persistence.ListOptions{}, fmt.Errorf("%w: --limit must be from 1 to %d, not %d", connect.ErrInvalid, maxListLimit, c.Limit)
	}
	opts := persistence.ListOptions{Owner: c.Owner, Destination: c.Destination, Key: c.Key, Limit: c.Limit}
	var err error
	if c.DueAfter != "" {
		if opts.DueFrom, err = parseWhen("--due-after", c.DueAfter, now); err != nil {
			return persistence.ListOptions{}, err
		}
	}
	if c.DueBefore != "" {
		if opts.DueBefore, err = parseWhen("--due-before", c.DueBefore, now); err != nil {
			return persistence.ListOptions{}, err
		}
	}
	if !opts.DueFrom.IsZero() && !opts.DueBefore.IsZero() && !opts.DueFrom.Before(opts.DueBefore) {
		return persistence.ListOptions{}, fmt.Errorf("%w: --due-after must be before --due-before", connect.ErrInvalid)
	}
	if c.After != "" {
		due, id, ok := strings.Cut(c.After, ",")
		if !ok || id == "" {
			return persistence.ListOptions{}, fmt.Errorf("%w: --after %q is not DUE,ID", connect.ErrInvalid, c.After)
		}
		if opts.After.Due, err = wireparse.ParseTime(due); err != nil {
			return persistence.ListOptions{}, fmt.Errorf("%w: --after: %w", connect.ErrInvalid, err)
		}
		opts.After.ID = id
	}
	return opts, nil
}

// nextPage is the --after of the page after list, or "" when list is the last page.
func nextPage(list []persistence.Timeout, limit int) string {
	if len(list) < limit || len(list) == 0 {
		return ""
	}
	last := list[len(list)-1]
	return last.Due.UTC().Format(jsonTime) + "," + last.ID
}

// listJSON is what list --json prints. Its field names are part of the command's interface:
// fields may be added, never renamed or removed.
type listJSON struct {
	Endpoint string        `json:"endpoint"`
	Store    string        `json:"store"`
	Timeouts []timeoutJSON `json:"timeouts"`
	// Next is the --after of the next page; null on the last page.
	Next *string `json:"next"`
}

// timeoutJSON is one pending timeout, without its payload.
type timeoutJSON struct {
	ID           string            `json:"id"`
	Due          *string           `json:"due"`
	Destination  string            `json:"destination"`
	Owner        string            `json:"owner"`
	Key          string            `json:"key"`
	FailureCount int               `json:"failure_count"`
	Metadata     map[string]string `json:"metadata"`
	// Parked is true for a parked timeout (timeoutmill parked list shows why).
	Parked bool `json:"parked"`
}

func toTimeoutJSON(t persistence.Timeout) timeoutJSON {
	md := t.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return timeoutJSON{
		ID: t.ID, Due: formatJSONTime(t.Due), Destination: t.Destination, Owner: t.Owner, Key: t.Key,
		FailureCount: t.FailureCount, Metadata: md, Parked: t.Parked != "",
	}
}

// Run lists pending timeouts.
func (c *listCmd) Run(e *env) error {
	opts, err := c.options(time.Now())
	if err != nil {
		return err
	}
	inspector, closeStore, err := c.inspector(e)
	if err != nil {
		return err
	}
	defer closeStore()
	list, err := inspector.List(e.ctx, opts)
	if err != nil {
		return connect.RedactError(err, c.Store)
	}
	if c.JSON {
		out := listJSON{Endpoint: c.Endpoint, Store: connect.Redact(c.Store), Timeouts: make([]timeoutJSON, 0, len(list))}
		for _, t := range list {
			out.Timeouts = append(out.Timeouts, toTimeoutJSON(t))
		}
		if next := nextPage(list, opts.Limit); next != "" {
			out.Next = &next
		}
		return writeJSON(e.stdout, out)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tDUE\tDESTINATION\tOWNER\tKEY\tFAILURES")
	for _, t := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", t.ID, wireparse.FormatExpire(t.Due), t.Destination, t.Owner, t.Key, t.FailureCount)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next := nextPage(list, opts.Limit); next != "" {
		fmt.Fprintf(e.stdout, "next page: --after %s\n", next)
	}
	return nil
}

type rescheduleCmd struct {
	storeFlags `embed:""`
	ID         string `arg:"" name:"id" help:"Id of the pending timeout to move."`
	At         string `help:"The new due time, RFC 3339 (2026-12-31T09:00:00Z); a past time means now." xor:"when"`
	In         string `help:"The new due time as a duration from now (90m); 0s means now." xor:"when"`
}

// Run moves a pending timeout's due time, keeping its id and message.
func (c *rescheduleCmd) Run(e *env) error {
	now := time.Now()
	var (
		at  time.Time
		err error
	)
	switch {
	case c.At != "" && c.In == "":
		at, err = parseWhen("--at", c.At, now)
	case c.In != "" && c.At == "":
		if _, derr := time.ParseDuration(c.In); derr != nil {
			return fmt.Errorf("%w: --in %q is not a duration (90m, 2h30m)", connect.ErrInvalid, c.In)
		}
		at, err = parseWhen("--in", c.In, now)
	default:
		return fmt.Errorf("%w: reschedule needs --at or --in", connect.ErrInvalid)
	}
	if err != nil {
		return err
	}
	if at.Before(now) {
		at = wireparse.RoundUp(now)
	}
	store, err := c.openExistingStore(e.ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	sch, ok := store.(persistence.Scheduler)
	if !ok {
		return fmt.Errorf("the store %s cannot reschedule", connect.Redact(c.Store))
	}
	moved, err := sch.Reschedule(e.ctx, c.ID, at, now)
	if err != nil {
		return connect.RedactError(err, c.Store)
	}
	if !moved {
		fmt.Fprintf(e.stdout, "not pending: %s (already delivered, being delivered, cancelled, or never stored)\n", c.ID)
		return fmt.Errorf("%s was not pending", c.ID)
	}
	fmt.Fprintf(e.stdout, "rescheduled %s to %s\n", c.ID, describeDue(at, now))
	return nil
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

type cancelCmd struct {
	storeFlags `embed:""`
	IDs        []string `arg:"" optional:"" name:"id" help:"Ids of the timeouts to cancel."`
	Owner      string   `help:"Cancel every pending timeout of this owner."`
}

// Run cancels timeouts.
func (c *cancelCmd) Run(e *env) error {
	if (len(c.IDs) == 0) == (c.Owner == "") {
		return errors.New("cancel: give either timeout ids or --owner, not both or neither")
	}
	store, err := c.openExistingStore(e.ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if c.Owner != "" {
		n, err := store.CancelByOwner(e.ctx, c.Owner)
		if err != nil {
			return connect.RedactError(err, c.Store)
		}
		fmt.Fprintf(e.stdout, "cancelled %d timeouts of owner %q\n", n, c.Owner)
		return nil
	}
	missing := 0
	for _, id := range c.IDs {
		ok, err := store.Cancel(e.ctx, id)
		if err != nil {
			return connect.RedactError(err, c.Store)
		}
		if ok {
			fmt.Fprintf(e.stdout, "cancelled %s\n", id)
		} else {
			missing++
			fmt.Fprintf(e.stdout, "not pending: %s (already delivered, cancelled, or never stored)\n", id)
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d ids were not pending", missing, len(c.IDs))
	}
	return nil
}

// inspector opens the store, creating nothing, as a persistence.Inspector.
func (f storeFlags) inspector(e *env) (persistence.Inspector, func(), error) {
	store, err := f.openExistingStore(e.ctx)
	if err != nil {
		return nil, nil, err
	}
	inspector, ok := store.(persistence.Inspector)
	if !ok {
		_ = store.Close()
		return nil, nil, fmt.Errorf("the store %s cannot list its contents", connect.Redact(f.Store))
	}
	return inspector, func() { _ = store.Close() }, nil
}

func describeDue(t, now time.Time) string {
	d := t.Sub(now).Round(time.Millisecond)
	if d < 0 {
		return fmt.Sprintf("%s (%s ago)", wireparse.FormatExpire(t), -d)
	}
	return fmt.Sprintf("%s (in %s)", wireparse.FormatExpire(t), d)
}
