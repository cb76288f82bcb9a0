package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	store, err := c.openStore(e.ctx, 0, logger)
	if err != nil {
		return err
	}
	defer store.Close()
	if installer, ok := store.(persistence.Installer); ok {
		if err := installer.SetupInfrastructure(e.ctx); err != nil {
			return fmt.Errorf("creating the table of %s: %w", c.Endpoint, connect.RedactError(err, c.Store))
		}
	}
	transport, err := connect.OpenTransport(e.ctx, c.Transport, logger)
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
	return nil
}

// listCmd lists pending timeouts. Each filter is a flag here and a field of
// persistence.ListOptions, joined in options.
type listCmd struct {
	storeFlags `embed:""`
	Owner      string `help:"Only this owner's timeouts."`
	Limit      int    `default:"100" help:"At most this many."`
	JSON       bool   `name:"json" help:"Print one JSON object (fields in docs/operations.md) instead of a table."`
}

// options are the store's list options the flags ask for.
func (c *listCmd) options() (persistence.ListOptions, error) {
	if c.Limit <= 0 {
		return persistence.ListOptions{}, fmt.Errorf("%w: --limit must be positive, not %d", connect.ErrInvalid, c.Limit)
	}
	return persistence.ListOptions{Owner: c.Owner, Limit: c.Limit}, nil
}

// listJSON is what list --json prints. Its field names are part of the command's interface:
// fields may be added, never renamed or removed.
type listJSON struct {
	Endpoint string        `json:"endpoint"`
	Store    string        `json:"store"`
	Timeouts []timeoutJSON `json:"timeouts"`
}

// timeoutJSON is one pending timeout, without its payload.
type timeoutJSON struct {
	ID           string            `json:"id"`
	Due          *string           `json:"due"`
	Destination  string            `json:"destination"`
	Owner        string            `json:"owner"`
	FailureCount int               `json:"failure_count"`
	Metadata     map[string]string `json:"metadata"`
}

// Run lists pending timeouts.
func (c *listCmd) Run(e *env) error {
	opts, err := c.options()
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
			md := t.Metadata
			if md == nil {
				md = map[string]string{}
			}
			out.Timeouts = append(out.Timeouts, timeoutJSON{
				ID: t.ID, Due: formatJSONTime(t.Due), Destination: t.Destination, Owner: t.Owner,
				FailureCount: t.FailureCount, Metadata: md,
			})
		}
		return writeJSON(e.stdout, out)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tDUE\tDESTINATION\tOWNER\tFAILURES")
	for _, t := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", t.ID, wireparse.FormatExpire(t.Due), t.Destination, t.Owner, t.FailureCount)
	}
	return w.Flush()
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
