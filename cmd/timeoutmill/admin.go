package main

import (
	"errors"
	"fmt"
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
}

// Run prints what the store holds.
func (c *statsCmd) Run(e *env) error {
	inspector, closeStore, err := c.inspector(e)
	if err != nil {
		return err
	}
	defer closeStore()
	st, err := inspector.Stats(e.ctx)
	if err != nil {
		return connect.RedactError(err, c.Store)
	}
	fmt.Fprintf(e.stdout, "endpoint:     %s\nstore:        %s\npending:      %d\n", c.Endpoint, connect.Redact(c.Store), st.Pending)
	if st.Pending == 0 {
		return nil
	}
	now := time.Now()
	fmt.Fprintf(e.stdout, "next due:     %s\n", describeDue(st.Earliest, now))
	if st.Earliest.Before(now) {
		fmt.Fprintf(e.stdout, "most overdue: %s late\n", now.Sub(st.Earliest).Round(time.Millisecond))
	} else {
		fmt.Fprintln(e.stdout, "most overdue: none")
	}
	fmt.Fprintf(e.stdout, "last due:     %s\n", describeDue(st.Latest, now))
	return nil
}

type listCmd struct {
	storeFlags `embed:""`
	Owner      string `help:"Only this owner's timeouts."`
	Limit      int    `default:"100" help:"At most this many."`
}

// Run lists pending timeouts.
func (c *listCmd) Run(e *env) error {
	inspector, closeStore, err := c.inspector(e)
	if err != nil {
		return err
	}
	defer closeStore()
	list, err := inspector.List(e.ctx, persistence.ListOptions{Owner: c.Owner, Limit: c.Limit})
	if err != nil {
		return connect.RedactError(err, c.Store)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tDUE\tDESTINATION\tOWNER\tFAILURES")
	for _, t := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", t.ID, wireparse.FormatExpire(t.Due), t.Destination, t.Owner, t.FailureCount)
	}
	return w.Flush()
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
	store, err := c.openStore(e.ctx, 0, newLogger(e))
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

// inspector opens the store as a persistence.Inspector.
func (f storeFlags) inspector(e *env) (persistence.Inspector, func(), error) {
	store, err := f.openStore(e.ctx, 0, newLogger(e))
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
