package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// parkedCmd looks at and releases the timeouts the dispatcher parked: their forward and their
// error-queue copy were both refused (a message larger than the broker takes, say).
type parkedCmd struct {
	List   parkedListCmd   `cmd:"" help:"List parked timeouts with their reason, earliest due first."`
	Replay parkedReplayCmd `cmd:"" help:"Make parked timeouts pending again, due at once when their due time has passed (fix the cause first, or they park again)."`
	Delete parkedDeleteCmd `cmd:"" help:"Delete parked timeouts; an id that is not parked is reported, not deleted."`
}

type parkedListCmd struct {
	storeFlags `embed:""`
	After      string `help:"Start after this timeout: the DUE,ID that the previous page printed as its next page."`
	Limit      int    `default:"100" help:"At most this many (at most 10000)."`
	JSON       bool   `name:"json" help:"Print one JSON object (fields in docs/operations.md) instead of a table."`
}

// parkedJSON is what parked list --json prints. Its field names are part of the command's
// interface: fields may be added, never renamed or removed.
type parkedJSON struct {
	Endpoint string              `json:"endpoint"`
	Store    string              `json:"store"`
	Timeouts []parkedTimeoutJSON `json:"timeouts"`
	// Next is the --after of the next page; null on the last page.
	Next *string `json:"next"`
}

// parkedTimeoutJSON is one parked timeout, without its payload.
type parkedTimeoutJSON struct {
	timeoutJSON
	Reason string `json:"reason"`
}

// Run lists parked timeouts.
func (c *parkedListCmd) Run(e *env) error {
	opts, err := (&listCmd{After: c.After, Limit: c.Limit}).options(time.Now())
	if err != nil {
		return err
	}
	opts.Parked = true
	inspector, closeStore, err := c.inspector(e)
	if err != nil {
		return err
	}
	defer closeStore()
	list, err := inspector.List(e.ctx, opts)
	if err != nil {
		return connect.RedactError(err, c.Store)
	}
	next := nextPage(list, opts.Limit)
	if c.JSON {
		out := parkedJSON{Endpoint: c.Endpoint, Store: connect.Redact(c.Store), Timeouts: make([]parkedTimeoutJSON, 0, len(list))}
		for _, t := range list {
			out.Timeouts = append(out.Timeouts, parkedTimeoutJSON{timeoutJSON: toTimeoutJSON(t), Reason: t.Parked})
		}
		if next != "" {
			out.Next = &next
		}
		return writeJSON(e.stdout, out)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tDUE\tDESTINATION\tFAILURES\tREASON")
	for _, t := range list {
		// A reason is one line of the table, whatever the errors it quotes hold.
		reason := strings.Join(strings.Fields(t.Parked), " ")
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", t.ID, wireparse.FormatExpire(t.Due), t.Destination, t.FailureCount, reason)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(e.stdout, "next page: --after %s\n", next)
	}
	return nil
}

type parkedReplayCmd struct {
	storeFlags `embed:""`
	IDs        []string `arg:"" optional:"" name:"id" help:"Ids of the parked timeouts to replay."`
	All        bool     `help:"Replay every parked timeout of the endpoint."`
}

// Run unparks timeouts. A running timeout manager delivers them at its next look at the store
// (at most its poll interval later).
func (c *parkedReplayCmd) Run(e *env) error {
	return onParked(e, c.storeFlags, c.IDs, c.All, parkedAction{
		command: "parked replay", done: "replayed", skipped: "not parked",
		call: func(ctx context.Context, p persistence.Parker, ids []string) (int, error) { return p.Unpark(ctx, ids) },
	})
}

type parkedDeleteCmd struct {
	storeFlags `embed:""`
	IDs        []string `arg:"" optional:"" name:"id" help:"Ids of the parked timeouts to delete."`
	All        bool     `help:"Delete every parked timeout of the endpoint."`
}

// Run deletes parked timeouts, and only parked ones: each is deleted only if it is still parked
// (persistence.Parker.DeleteParked), so that one replayed meanwhile is kept.
func (c *parkedDeleteCmd) Run(e *env) error {
	return onParked(e, c.storeFlags, c.IDs, c.All, parkedAction{
		command: "parked delete", done: "deleted", skipped: "not parked, not deleted",
		call: func(ctx context.Context, p persistence.Parker, ids []string) (int, error) {
			return p.DeleteParked(ctx, ids)
		},
	})
}

// parkedAction is what parked replay or parked delete does to parked timeouts, and its words.
type parkedAction struct {
	command, done, skipped string
	// call acts on the parked timeouts among ids, each only while it is parked, and returns
	// how many it acted on.
	call func(ctx context.Context, p persistence.Parker, ids []string) (int, error)
}

// onParked runs a on the timeouts with ids, or on every parked one (all), and reports each id it
// did not act on, and why. It fails when some id was not parked.
func onParked(e *env, f storeFlags, ids []string, all bool, a parkedAction) error {
	if (len(ids) == 0) == !all {
		return fmt.Errorf("%w: %s: give either timeout ids or --all, not both or neither", connect.ErrInvalid, a.command)
	}
	store, parker, err := f.openParker(e.ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if all {
		n, err := eachParkedPage(e.ctx, store, func(page []persistence.Timeout) (int, error) {
			return a.call(e.ctx, parker, idsOf(page))
		})
		if err != nil {
			return fmt.Errorf("%s %d, then: %w", a.done, n, connect.RedactError(err, f.Store))
		}
		fmt.Fprintf(e.stdout, "%s %d parked timeouts\n", a.done, n)
		return nil
	}
	missing := 0
	for _, id := range ids {
		n, err := a.call(e.ctx, parker, []string{id})
		if err != nil {
			return connect.RedactError(err, f.Store)
		}
		if n == 1 {
			fmt.Fprintf(e.stdout, "%s %s\n", a.done, id)
			continue
		}
		why, err := notParked(e.ctx, store, id)
		if err != nil {
			return connect.RedactError(err, f.Store)
		}
		if why == "" {
			why = "parked again meanwhile; run the command again"
		}
		missing++
		fmt.Fprintf(e.stdout, "%s: %s (%s)\n", a.skipped, id, why)
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d ids were not parked", missing, len(ids))
	}
	return nil
}

// openParker opens the store, creating nothing, as a persistence.Parker.
func (f storeFlags) openParker(ctx context.Context) (persistence.Store, persistence.Parker, error) {
	store, err := f.openExistingStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	parker, ok := store.(persistence.Parker)
	if !ok {
		_ = store.Close()
		return nil, nil, fmt.Errorf("the store %s cannot park timeouts", connect.Redact(f.Store))
	}
	return store, parker, nil
}

// parkedPage is how many parked timeouts --all handles per call.
const parkedPage = 1000

// eachParkedPage lists the parked timeouts page by page, calls do with each page, and returns
// the sum of what do returned. Paging is by position (due time, id), so timeouts that do
// releases and that park again meanwhile are not met twice.
func eachParkedPage(ctx context.Context, store persistence.Store, do func(page []persistence.Timeout) (int, error)) (int, error) {
	inspector, ok := store.(persistence.Inspector)
	if !ok {
		return 0, errors.New("the store cannot list its parked timeouts")
	}
	opts := persistence.ListOptions{Parked: true, Limit: parkedPage}
	total := 0
	for {
		page, err := inspector.List(ctx, opts)
		if err != nil {
			return total, err
		}
		if len(page) == 0 {
			return total, nil
		}
		n, err := do(page)
		total += n
		if err != nil || len(page) < parkedPage {
			return total, err
		}
		last := page[len(page)-1]
		opts.After = persistence.Position{Due: last.Due, ID: last.ID}
	}
}

// notParked says why the timeout with that id is not parked, or "" when it is.
func notParked(ctx context.Context, store persistence.Store, id string) (string, error) {
	t, err := store.Peek(ctx, id)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return "not stored: delivered, cancelled, or never scheduled", nil
	case err != nil:
		return "", err
	case t.Parked == "":
		return "pending, not parked", nil
	}
	return "", nil
}

func idsOf(ts []persistence.Timeout) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}
