package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// steeringCalls is how many times each steering call is timed on each store.
const steeringCalls = 50

// steeringOps are the calls behind Manager.Get, List, Reschedule and Cancel, in the order their
// figures are reported: name, and the call on a store given an id that is stored there.
var steeringOps = []struct {
	name string
	call func(ctx context.Context, s *scale, id string, pos persistence.Position) error
}{
	{"get", func(ctx context.Context, s *scale, id string, _ persistence.Position) error {
		_, err := s.store.Peek(ctx, id)
		return err
	}},
	{"list", func(ctx context.Context, s *scale, _ string, _ persistence.Position) error {
		_, err := s.inspector().List(ctx, persistence.ListOptions{})
		return err
	}},
	{"list_after", func(ctx context.Context, s *scale, _ string, pos persistence.Position) error {
		_, err := s.inspector().List(ctx, persistence.ListOptions{After: pos})
		return err
	}},
	{"list_key", func(ctx context.Context, s *scale, id string, _ persistence.Position) error {
		_, err := s.inspector().List(ctx, persistence.ListOptions{Key: "key-" + id})
		return err
	}},
	{"reschedule", func(ctx context.Context, s *scale, id string, _ persistence.Position) error {
		now := time.Now()
		ok, err := s.scheduler().Reschedule(ctx, id, now.Add(60*24*time.Hour), now)
		if err == nil && !ok {
			err = fmt.Errorf("timeout %s was not pending", id)
		}
		return err
	}},
	{"cancel", func(ctx context.Context, s *scale, id string, _ persistence.Position) error {
		ok, err := s.store.Cancel(ctx, id)
		if err == nil && !ok {
			err = fmt.Errorf("timeout %s was not stored", id)
		}
		return err
	}},
}

func (s *scale) inspector() persistence.Inspector { return any(s.store).(persistence.Inspector) }
func (s *scale) scheduler() persistence.Scheduler { return any(s.store).(persistence.Scheduler) }

// timeSteering times each of steeringOps steeringCalls times on each side, in turns, on ids not
// due for a day (each call its own id, so Cancel finds one), and returns each side's p50 per call.
func timeSteering(ctx context.Context, sides []*scale) ([]map[string]time.Duration, error) {
	for _, s := range sides {
		if _, ok := any(s.store).(persistence.Scheduler); !ok {
			return nil, errors.New("the PostgreSQL store does not implement persistence.Scheduler")
		}
	}
	ids := make([][]string, len(sides))
	pos := make([]persistence.Position, len(sides))
	for i, s := range sides {
		rows, err := s.db.QueryContext(ctx, `SELECT id FROM `+s.table+` WHERE due > now() + interval '1 day' LIMIT $1`,
			len(steeringOps)*steeringCalls)
		if err != nil {
			return nil, fmt.Errorf("picking ids: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			ids[i] = append(ids[i], id)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if len(ids[i]) < len(steeringOps)*steeringCalls {
			return nil, fmt.Errorf("only %d timeouts not due for a day to steer", len(ids[i]))
		}
		// A page from the middle of the table: the cursor of the timeout due in 15 days.
		if err := s.db.QueryRowContext(ctx, `SELECT due, id FROM `+s.table+` WHERE due >= now() + interval '15 days' ORDER BY due, id LIMIT 1`).
			Scan(&pos[i].Due, &pos[i].ID); err != nil {
			return nil, fmt.Errorf("picking a page: %w", err)
		}
	}
	times := make([]map[string][]time.Duration, len(sides))
	for i := range times {
		times[i] = map[string][]time.Duration{}
	}
	for k, op := range steeringOps {
		for n := range steeringCalls {
			for i, s := range sides {
				id := ids[i][k*steeringCalls+n]
				start := time.Now()
				if err := op.call(ctx, s, id, pos[i]); err != nil {
					return nil, fmt.Errorf("%s: %w", op.name, err)
				}
				times[i][op.name] = append(times[i][op.name], time.Since(start))
			}
		}
	}
	p50 := make([]map[string]time.Duration, len(sides))
	for i := range sides {
		p50[i] = map[string]time.Duration{}
		for name, ds := range times[i] {
			slices.Sort(ds)
			p50[i][name] = ds[len(ds)/2]
		}
	}
	return p50, nil
}

// statsCalls is how many times Stats is timed on each store: few, as a Stats that reads the
// whole table takes seconds at millions pending.
const statsCalls = 5

// timeStats times statsCalls calls of Stats (what the gauges, the dashboard's overview and
// `timeoutmill stats` ask) on each side, in turns, and returns each side's p50.
func timeStats(ctx context.Context, sides []*scale) ([]time.Duration, error) {
	times := make([][]time.Duration, len(sides))
	for range statsCalls {
		for i, s := range sides {
			start := time.Now()
			if _, err := s.inspector().Stats(ctx, start); err != nil {
				return nil, fmt.Errorf("stats: %w", err)
			}
			times[i] = append(times[i], time.Since(start))
		}
	}
	p50 := make([]time.Duration, len(sides))
	for i, ds := range times {
		slices.Sort(ds)
		p50[i] = ds[len(ds)/2]
	}
	return p50, nil
}

// statsNote adds the p50 of Stats to a scale row.
func statsNote(r *Result, p50 time.Duration) {
	r.Figures["stats_p50_ms"] = float64(p50) / float64(time.Millisecond)
	r.Notes = append(r.Notes, fmt.Sprintf("Stats p50 %s ms (%d calls)", millis(p50), statsCalls))
}
